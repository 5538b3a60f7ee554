package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	rev := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "false"}}
	dirty := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}
	for _, c := range []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{"no build info", nil, false, "(devel)"},
		{"go install @v1.2.3", &debug.BuildInfo{Main: debug.Module{Path: module, Version: "v1.2.3"}, Settings: rev}, true, "v1.2.3"},
		{"a clone, committed", &debug.BuildInfo{Main: debug.Module{Path: module, Version: "(devel)"}, Settings: rev}, true, "(devel)+0123456789ab"},
		{"a clone, changed", &debug.BuildInfo{Main: debug.Module{Path: module, Version: "(devel)"}, Settings: dirty}, true, "(devel)+0123456789ab-dirty"},
		{"go test, no vcs", &debug.BuildInfo{Main: debug.Module{Path: module, Version: "(devel)"}}, true, "(devel)"},
		{"a dependency", &debug.BuildInfo{Main: debug.Module{Path: "example.com/app", Version: "(devel)"},
			Deps: []*debug.Module{{Path: "golang.org/x/sync", Version: "v0.1.0"}, {Path: module, Version: "v0.4.0"}}}, true, "v0.4.0"},
	} {
		if got := fromBuildInfo(c.bi, c.ok); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestOverride(t *testing.T) {
	defer func(v string) { Override = v }(Override)
	Override = "v9.9.9"
	if String() != "v9.9.9" {
		t.Fatal(String())
	}
}
