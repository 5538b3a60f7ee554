// Package version is pronto's one version string, shown by 'pronto version' and the HTTP manifest.
package version

import (
	"runtime/debug"
	"sync"
)

// module is pronto's module path, looked up among the dependencies when pronto is built into another
// program.
const module = "github.com/pronto-jobs/pronto"

// Override, when set at link time (-ldflags "-X github.com/pronto-jobs/pronto/internal/version.Override=v1.2.3"),
// is the version, whatever the build info says.
var Override = ""

var cached = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	return fromBuildInfo(bi, ok)
})

// String returns pronto's version: Override if set; else the module version the Go toolchain
// recorded ("v1.2.3" for 'go install ...@v1.2.3', or pronto's version as a dependency of another
// program); else "(devel)", followed by the VCS revision when the build recorded one
// ("(devel)+0123456789ab", "+0123456789ab-dirty" for uncommitted changes).
func String() string {
	if Override != "" {
		return Override
	}
	return cached()
}

func fromBuildInfo(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "(devel)"
	}
	if bi.Main.Path == module && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	if bi.Main.Path != module {
		for _, d := range bi.Deps {
			if d.Path == module && d.Version != "" && d.Version != "(devel)" {
				return d.Version
			}
		}
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	v := "(devel)"
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		v += "+" + rev
		if dirty {
			v += "-dirty"
		}
	}
	return v
}
