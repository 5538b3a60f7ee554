package cli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the release this binary was built from; release builds set it with
// -ldflags "-X github.com/pronto-jobs/pronto/internal/cli.Version=v1.2.3". Otherwise the module
// version recorded by the Go toolchain, or "devel", is shown.
var Version = ""

// versionString describes the build: version, VCS revision when known, Go version and platform.
func versionString() string {
	v := Version
	rev, dirty := "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "devel"
	}
	out := "pronto " + v
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if dirty {
			rev += "+dirty"
		}
		out += " (" + rev + ")"
	}
	return fmt.Sprintf("%s %s %s/%s", out, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func cmdVersion(_ context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto version", "Print pronto's version, the Go version and the platform.")
	if _, err := fs.parse(args, 0, 0); err != nil {
		return err
	}
	fmt.Fprintln(r.env.Stdout, versionString())
	return nil
}
