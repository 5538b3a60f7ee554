package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pronto-jobs/pronto/internal/redistest"
	"github.com/pronto-jobs/pronto/internal/testdb"
)

// result is what one in-process run of the CLI printed and returned.
type result struct {
	args   []string
	code   int
	stdout string
	stderr string
}

func (r result) String() string {
	return fmt.Sprintf("pronto %s\nexit %d\n--- stdout\n%s--- stderr\n%s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// ok fails the test unless the run succeeded.
func (r result) ok(t *testing.T) result {
	t.Helper()
	if r.code != ExitOK {
		t.Fatalf("expected success:\n%s", r)
	}
	return r
}

// fails fails the test unless the run exited with code, printing one "pronto: " line containing want
// (and, for usage errors, the help hint), and no Go stack trace.
func (r result) fails(t *testing.T, code int, want string) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("expected exit %d:\n%s", code, r)
	}
	if !strings.HasPrefix(r.stderr, "pronto: ") || !strings.Contains(r.stderr, want) {
		t.Fatalf("expected stderr to start with \"pronto: \" and contain %q:\n%s", want, r)
	}
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	max := 1
	if code == ExitUsage {
		max = 2
	}
	if len(lines) > max {
		t.Fatalf("expected at most %d stderr lines:\n%s", max, r)
	}
	for _, bad := range []string{"goroutine ", "panic", ".go:"} {
		if strings.Contains(r.stderr, bad) {
			t.Fatalf("stderr looks like a stack trace (%q):\n%s", bad, r)
		}
	}
	return r
}

// decode parses stdout as JSON into v.
func (r result) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("stdout is not the expected JSON (%v):\n%s", err, r)
	}
}

// runOpts are the outside world of a run beyond its arguments.
type runOpts struct {
	stdin    string
	env      map[string]string
	terminal bool
	ctx      context.Context
}

// run runs the CLI in-process with an empty environment.
func run(t *testing.T, args ...string) result {
	t.Helper()
	return runWith(t, runOpts{}, args...)
}

func runWith(t *testing.T, o runOpts, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx := o.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	code := Run(ctx, args, Env{
		Stdin:      strings.NewReader(o.stdin),
		Stdout:     &stdout,
		Stderr:     &stderr,
		Getenv:     func(k string) string { return o.env[k] },
		IsTerminal: func() bool { return o.terminal },
		// The tests share named in-memory stores between runs, as an embedding program may.
		SharedMemory: true,
	})
	return result{args: args, code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// backend is a database the commands are tested on; setup returns the flags that select a fresh one.
type backend struct {
	name  string
	setup func(t *testing.T) []string
	// migrated says whether the database has a schema to migrate.
	migrated bool
}

var memoryCounter atomic.Int64

var backends = []backend{
	{name: "sqlite", migrated: true, setup: func(t *testing.T) []string {
		return []string{"--database-url", "sqlite:" + filepath.Join(t.TempDir(), "pronto.db")}
	}},
	{name: "memory", setup: func(t *testing.T) []string {
		return []string{"--database-url", fmt.Sprintf("memory:test-%d", memoryCounter.Add(1))}
	}},
	{name: "postgres", migrated: true, setup: func(t *testing.T) []string {
		return []string{"--database-url", testdb.URL(), "--schema", testdb.Schema(t)}
	}},
	{name: "redis", setup: func(t *testing.T) []string {
		return []string{"--database-url", "redis://" + redistest.Addr() + "/0?key_prefix=" + redistest.KeyPrefix(t)}
	}},
}

// forEachBackend runs f as a parallel subtest per backend, with the flags of a fresh, migrated database.
func forEachBackend(t *testing.T, f func(t *testing.T, db []string)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db := b.setup(t)
			run(t, append([]string{"migrate", "up"}, db...)...).ok(t)
			f(t, db)
		})
	}
}

// schemaless says whether the database flags select a store without a schema to migrate (memory,
// Redis): its migrate commands say so and change nothing.
func schemaless(db []string) bool {
	return strings.HasPrefix(db[1], "memory:") || strings.HasPrefix(db[1], "redis:")
}

// with appends the database flags to a command line.
func with(db []string, args ...string) []string {
	return append(append([]string{}, args...), db...)
}
