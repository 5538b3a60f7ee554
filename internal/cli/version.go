package cli

import (
	"context"
	"fmt"
	"runtime"

	"github.com/pronto-jobs/pronto/internal/version"
)

// versionString describes the build: pronto's version (the one the HTTP manifest reports too), the Go
// version and the platform.
func versionString() string {
	return fmt.Sprintf("pronto %s %s %s/%s", version.String(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func cmdVersion(_ context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto version",
		"Print pronto's version (as 'go install' recorded it, or (devel) with the VCS revision for a\n"+
			"build from a clone), the Go version and the platform. 'pronto serve' reports the same version\n"+
			"in its manifest.").ignoringDatabase()
	if _, err := fs.parse(args, 0, 0); err != nil {
		return err
	}
	fmt.Fprintln(r.env.Stdout, versionString())
	return nil
}
