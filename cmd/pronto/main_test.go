package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto/internal/testdb"
)

// binary is the pronto command built once for these tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pronto-cli-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "pronto")
	build := exec.Command("go", "build", "-race", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the pronto binary:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type run struct {
	code           int
	stdout, stderr string
}

// pronto runs the binary with args, in dir, with only the given environment variables (plus PATH and
// TMPDIR), and waits at most a minute.
func pronto(t *testing.T, dir string, env []string, args ...string) run {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "TMPDIR=" + dir}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	err := cmd.Wait()
	r := run{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return r
}

func (r run) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", r.code, r.stdout, r.stderr)
}

// expect checks the exit code and that stderr has at most lines lines, contains want, and is not a
// Go stack trace.
func (r run) expect(t *testing.T, code, lines int, want string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("want exit %d:\n%s", code, r)
	}
	if n := strings.Count(r.stderr, "\n"); n > lines || !strings.Contains(r.stderr, want) {
		t.Fatalf("want at most %d stderr lines containing %q:\n%s", lines, want, r)
	}
	if strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, ".go:") {
		t.Fatalf("stack trace on stderr:\n%s", r)
	}
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := pronto(t, dir, nil, "version")
	r.expect(t, 0, 0, "")
	if !strings.HasPrefix(r.stdout, "pronto ") {
		t.Fatalf("version:\n%s", r)
	}
	pronto(t, dir, nil).expect(t, 2, 70, "pronto: no command given") // the usage: one line per command
	pronto(t, dir, nil, "frob").expect(t, 2, 2, `pronto: unknown command "frob"`)
	pronto(t, dir, nil, "jobs", "list", "--database-url", "mysql://x").
		expect(t, 2, 2, `pronto: unsupported database URL "mysql://x" (scheme "mysql")`)
	pronto(t, dir, []string{"PRONTO_DATABASE_URL=mysql://x"}, "queues", "list").expect(t, 2, 2, `"mysql://x"`)
	pronto(t, dir, nil, "jobs", "list", "--database-url", "postgres://u:pw@127.0.0.1:1/db").
		expect(t, 1, 1, "pronto: cannot connect to PostgreSQL at postgres://u:xxxxx@127.0.0.1:1/db")
	pronto(t, dir, nil, "jobs", "list", "--database-url", "sqlite:missing/dir/p.db").expect(t, 1, 1, `directory "missing/dir" does not exist`)

	// The default database is pronto.db in the working directory.
	pronto(t, dir, nil, "jobs", "list").expect(t, 1, 1, "pronto: no database at pronto.db; create it with: pronto migrate up")
	pronto(t, dir, nil, "migrate", "up").expect(t, 0, 0, "")
	if _, err := os.Stat(filepath.Join(dir, "pronto.db")); err != nil {
		t.Fatal(err)
	}
	pronto(t, dir, nil, "jobs", "get", "01900000-0000-7000-8000-000000000001").
		expect(t, 3, 1, "pronto: job 01900000-0000-7000-8000-000000000001 not found")
	r = pronto(t, dir, nil, "enqueue", "email.send", "--args", `{"to":"a@example.com"}`)
	r.expect(t, 0, 0, "")
	id := strings.TrimSpace(r.stdout)
	if r := pronto(t, dir, nil, "jobs", "get", id); r.code != 0 || !strings.Contains(r.stdout, `Args:         [{"to":"a@example.com"}]`) {
		t.Fatalf("jobs get:\n%s", r)
	}
}

func TestPostgresThroughEnvironment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := []string{"PRONTO_DATABASE_URL=" + testdb.URL()}
	schema := testdb.Schema(t)
	pronto(t, dir, env, "queues", "list", "--schema", schema).expect(t, 1, 1, "has no pronto schema yet; create it with: pronto migrate up --schema "+schema)
	pronto(t, dir, env, "migrate", "up", "--schema", schema).expect(t, 0, 0, "")
	r := pronto(t, dir, env, "enqueue", "report.build", "--queue", "reports", "--schema", schema)
	r.expect(t, 0, 0, "")
	r = pronto(t, dir, env, "--schema", schema, "queues", "list")
	if r.code != 0 || !strings.Contains(r.stdout, "reports") {
		t.Fatalf("queues list:\n%s", r)
	}
}

// TestDemoThroughAPipe runs the demo as a script would: plain progress lines, a summary, exit 0.
func TestDemoThroughAPipe(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := pronto(t, dir, nil, "demo", "--jobs", "20")
	r.expect(t, 0, 0, "")
	if strings.Contains(r.stdout, "\x1b[") {
		t.Fatalf("escape codes written to a pipe:\n%s", r)
	}
	// The demo makes a fresh database file per run in the temporary directory (dir here).
	for _, want := range []string{
		"Database: SQLite file " + filepath.Join(dir, "pronto-demo-"),
		"(new for this run)",
		"finished 20/20",
		"Done: 20 jobs in ",
		"Totals: 19 completed, 1 discarded.",
		"pronto jobs list --state discarded --database-url sqlite:" + filepath.Join(dir, "pronto-demo-"),
	} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("demo output lacks %q:\n%s", want, r)
		}
	}
	// The suggested follow-up command works.
	m := regexp.MustCompile(`Database: SQLite file (\S+)`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("the demo does not name its database file:\n%s", r)
	}
	r = pronto(t, dir, nil, "jobs", "list", "--state", "discarded", "--database-url", "sqlite:"+m[1])
	if r.code != 0 || strings.Count(r.stdout, "webhook.deliver") != 1 || !strings.Contains(r.stdout, "POST https://hooks.dead-endpoint.example") {
		t.Fatalf("follow-up:\n%s", r)
	}
}

// TestDemoInterrupt sends SIGINT to a running demo: it stops its workers, prints what it did, exits 1.
func TestDemoInterrupt(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(binary, "demo", "--jobs", "3000", "--database-url", "memory:")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("want exit 1, got %v\n%s\n%s", err, stdout.String(), stderr.String())
		}
	case <-time.After(60 * time.Second): // generous: the outcome matters, not the time on a loaded machine
		_ = cmd.Process.Kill()
		t.Fatalf("the demo did not stop within 60 s of SIGINT\n%s", stdout.String())
	}
	if !strings.Contains(stderr.String(), "pronto: demo: interrupted") || !strings.Contains(stdout.String(), "Stopped after") {
		t.Fatalf("interrupted demo output:\n%s\n%s", stdout.String(), stderr.String())
	}
}
