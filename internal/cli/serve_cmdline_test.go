package cli

import (
	"strings"
	"testing"
)

// TestProfilerCmdlineRedacted: the profiler's command line (/debug/pprof/cmdline, readable by any
// holder of the API key, every OJS worker included) hides the database password and the API key,
// in either flag form. Before, it answered os.Args as given: a server started with
// --database-url postgres://postgres:hunter2@... showed hunter2.
func TestProfilerCmdlineRedacted(t *testing.T) {
	args := []string{"pronto", "serve", "--database-url", "postgres://postgres:hunter2@db:5432/jobs?sslpassword=s3cret",
		"--notify-url=redis://:redispw@cache:6379/0", "--api-key", "k3y-secret", "-api-key=other-secret",
		"--database-listen-url", "host=db password=dsnpw", "--addr", "127.0.0.1:8080"}
	got := strings.Join(redactArgs(args), " ")
	for _, secret := range []string{"hunter2", "s3cret", "redispw", "k3y-secret", "other-secret", "dsnpw"} {
		if strings.Contains(got, secret) {
			t.Errorf("%q shown: %s", secret, got)
		}
	}
	for _, kept := range []string{"serve", "--database-url", "db:5432/jobs", "--api-key", "127.0.0.1:8080"} {
		if !strings.Contains(got, kept) {
			t.Errorf("%q lost: %s", kept, got)
		}
	}
}
