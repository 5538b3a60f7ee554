package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store/memory"
)

// withQuery adds a query parameter to a URL that may have a query already.
func withQuery(u, param string) string {
	if strings.Contains(u, "?") {
		return u + "&" + param
	}
	return u + "?" + param
}

// cancelOn is a writer that records what is written and cancels a context once it has seen want.
type cancelOn struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	want   string
	cancel context.CancelFunc
}

func (w *cancelOn) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.cancel()
	}
	return n, err
}

func (w *cancelOn) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestPasswordsNeverPrinted: a password in the query of a PostgreSQL URL, or in a key=value DSN, is
// hidden in serve's startup line and in every error that quotes the URL.
func TestPasswordsNeverPrinted(t *testing.T) {
	t.Parallel()
	const secret = "hunter2"
	for _, args := range [][]string{
		{"jobs", "list", "--database-url", "postgres://u@127.0.0.1:1/x?connect_timeout=1&password=" + secret},
		{"jobs", "list", "--database-url", "postgres://u@127.0.0.1:1/x?password=" + secret + "&bad=%zz"},
		{"jobs", "list", "--database-url", "host=db user=u password=" + secret + " dbname=app"},
		{"jobs", "list", "--database-url", "postgres://u@127.0.0.1:1/x", "--database-listen-url", "host=db password=" + secret},
	} {
		res := run(t, args...)
		if res.code == ExitOK || strings.Contains(res.stderr, secret) || !strings.Contains(res.stderr, "xxxxx") {
			t.Errorf("the password is not hidden:\n%s", res)
		}
	}
	// The DSN is quoted once, not a second time as its "scheme".
	res := run(t, "jobs", "list", "--database-url", "host=db password="+secret).fails(t, ExitUsage, "not a URL")
	if strings.Count(res.stderr, "host=db") != 1 {
		t.Errorf("the DSN is repeated:\n%s", res)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &cancelOn{want: "dashboard at", cancel: cancel}
	code := Run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--database-url", withQuery(testdb.URL(), "password="+secret),
		"--schema", testdb.Schema(t)}, Env{Stdout: out, Stderr: out})
	if code != ExitOK || strings.Contains(out.String(), secret) || !strings.Contains(out.String(), "password=xxxxx") {
		t.Fatalf("serve exited %d, printing:\n%s", code, out)
	}
}

// recordingRedisLog records go-redis's log lines.
type recordingRedisLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *recordingRedisLog) Printf(_ context.Context, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, format)
}

// TestServeNotifyURLUnreachable: an unreachable --notify-url is a runtime error (exit 1), in one line
// of pronto's, without go-redis's own log lines. Not parallel: it sets go-redis's global logger.
func TestServeNotifyURLUnreachable(t *testing.T) {
	rec := &recordingRedisLog{}
	goredis.SetLogger(rec)
	defer goredis.SetLogger(quietRedisLog{})
	run(t, "serve", "--addr", "127.0.0.1:0", "--database-url", "memory:", "--notify-url", "redis://127.0.0.1:1/9").
		fails(t, ExitError, "--notify-url: cannot connect to Redis at redis://127.0.0.1:1/9")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.lines) > 0 {
		t.Fatalf("go-redis logged %q", rec.lines)
	}
	// A malformed one stays a usage error.
	run(t, "serve", "--database-url", "memory:", "--notify-url", "redis://127.0.0.1:6379/notanumber").fails(t, ExitUsage, "--notify-url")
}

// TestRedisDBIndexOutOfRange: a DB index the server does not have is named as such (exit 1), not as
// a server out of reach, for --database-url and --notify-url alike.
func TestRedisDBIndexOutOfRange(t *testing.T) {
	t.Parallel()
	const url = "redis://127.0.0.1:6379/100000"
	for _, args := range [][]string{
		{"jobs", "list", "--database-url", url},
		{"serve", "--addr", "127.0.0.1:0", "--database-url", "memory:", "--notify-url", url},
	} {
		res := run(t, args...).fails(t, ExitError, "Redis at "+url+": the DB index in the URL is out of range")
		if strings.Contains(res.stderr, "cannot") {
			t.Errorf("%v: says the server is out of reach:\n%s", args, res)
		}
	}
}

// TestServeListenURLUnreachable: serve fails at start (exit 1) when --database-listen-url cannot be
// reached, instead of running with a listener that never connects.
func TestServeListenURLUnreachable(t *testing.T) {
	t.Parallel()
	// Bounded, in case serve starts anyway: it would then stop and exit 0.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runWith(t, runOpts{ctx: ctx}, "serve", "--addr", "127.0.0.1:0", "--database-url", testdb.URL(), "--schema", testdb.Schema(t),
		"--database-listen-url", "postgres://postgres@127.0.0.1:1/test?connect_timeout=1").
		fails(t, ExitError, "cannot connect to PostgreSQL at postgres://postgres@127.0.0.1:1/test?connect_timeout=1 (--database-listen-url")
}

// TestZeroTimeIsABound: the zero time given to --created-before or --finished-before is a bound
// that no job passes, not "no bound".
func TestZeroTimeIsABound(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db []string) {
		id := strings.TrimSpace(run(t, with(db, "enqueue", "a.b")...).ok(t).stdout)
		run(t, with(db, "jobs", "cancel", id)...).ok(t)
		count := func(args ...string) int {
			var l struct{ Jobs []json.RawMessage }
			run(t, with(db, append([]string{"jobs", "list", "--json"}, args...)...)...).ok(t).decode(t, &l)
			return len(l.Jobs)
		}
		const zero = "0001-01-01T00:00:00Z"
		if n := count("--created-before", zero); n != 0 {
			t.Errorf("--created-before %s: %d jobs", zero, n)
		}
		if n := count("--finished-before", zero); n != 0 {
			t.Errorf("--finished-before %s: %d jobs", zero, n)
		}
		if n := count("--created-after", zero); n != 1 {
			t.Errorf("--created-after %s: %d jobs", zero, n)
		}
	})
}

// TestMigrateDownStepsAndAll: --steps and --all together are refused, and nothing is rolled back.
func TestMigrateDownStepsAndAll(t *testing.T) {
	t.Parallel()
	db := []string{"--database-url", "sqlite:" + filepath.Join(t.TempDir(), "p.db")}
	run(t, with(db, "migrate", "up")...).ok(t)
	run(t, with(db, "migrate", "down", "--steps", "1", "--all")...).fails(t, ExitUsage, "--steps and --all exclude each other")
	if res := run(t, with(db, "migrate", "status")...).ok(t); !strings.Contains(res.stdout, "up to date") {
		t.Fatalf("rolled back:\n%s", res)
	}
}

// TestClientsListJSONShape: clients list --json has the shape of every list: items and "next".
func TestClientsListJSONShape(t *testing.T) {
	t.Parallel()
	var out map[string]json.RawMessage
	run(t, "clients", "list", "--json", "--database-url", "memory:").ok(t).decode(t, &out)
	if string(out["clients"]) != "[]" || string(out["next"]) != `""` || len(out) != 2 {
		t.Fatalf("clients list --json: %v", out)
	}
}

// TestInvalidFlagValuesAreUsageErrors: a flag value that cannot work is a usage error (exit 2),
// found before anything is created or listened on.
func TestInvalidFlagValuesAreUsageErrors(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "p.db")
	run(t, "migrate", "up", "--unlogged", "--database-url", "sqlite:"+path).fails(t, ExitUsage, "PostgreSQL only")
	if _, err := os.Stat(path); err == nil {
		t.Errorf("migrate up --unlogged created %s", path)
	}
	run(t, "migrate", "up", "--logged", "--database-url", "memory:").fails(t, ExitUsage, "PostgreSQL only")
	run(t, "serve", "--addr", "127.0.0.1:99999", "--database-url", "memory:").fails(t, ExitUsage, "port must be a number from 0 to 65535")
	run(t, "serve", "--metrics-addr", "127.0.0.1:70000", "--database-url", "memory:").fails(t, ExitUsage, "--metrics-addr")
}

// TestMessagesNameTheMistake: each message says what is wrong with what was given.
func TestMessagesNameTheMistake(t *testing.T) {
	t.Parallel()
	db := []string{"--database-url", "memory:"}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"workflows", "get", "bogus"}, ExitUsage, `invalid workflow id "bogus": workflow ids are UUIDv7s`},
		{[]string{"tenants", "set", "acme", "--weight", "0"}, ExitUsage, "--weight 0: must be 1 to 1000"},
		{[]string{"queues", "set-max-depth", "email", "-1"}, ExitUsage, `max depth "-1": must be a whole number ≥ 0 (0 lifts the bound`},
		{[]string{"jobs", "list", "--limit", "x"}, ExitUsage, `invalid value "x" for flag --limit: must be a whole number`},
		{[]string{"serve", "--tenant-noisy-depth-ratio", "x"}, ExitUsage, `invalid value "x" for flag --tenant-noisy-depth-ratio: must be a number`},
		{[]string{"rate-limits", "set", "k", "--rate", "5", "--period", "0s"}, ExitUsage, "--period 0s: the rate's window must be positive"},
		{[]string{"tenants", "set", "acme", "--rate", "5", "--period", "0s"}, ExitUsage, "--period 0s: the rate's window must be positive"},
		{[]string{"tenants", "set", "acme", "--enqueue-rate", "5", "--enqueue-period", "0s"}, ExitUsage, "--enqueue-period 0s: the enqueue rate's window must be positive"},
	} {
		res := run(t, with(db, c.args...)...).fails(t, c.code, c.want)
		if strings.Contains(res.stderr, "parse error") || strings.Contains(res.stderr, "go together") {
			t.Errorf("misleading:\n%s", res)
		}
	}
	res := run(t, "jobs", "list", "--database-url", "postgres://u@127.0.0.1:1/x", "--database-listen-url", "mysql://x").
		fails(t, ExitUsage, `--database-listen-url "mysql://x": must be a postgres:// URL`)
	if strings.Contains(res.stderr, "redis") || strings.Contains(res.stderr, "sqlite") {
		t.Errorf("offers forms the flag cannot take:\n%s", res)
	}
	// A TLS URL against the plain-text test Redis: the timeout is explained.
	run(t, "jobs", "list", "--database-url", "rediss://127.0.0.1:6379/0").fails(t, ExitError, "is TLS enabled on the server?")
}

// TestDemoSummaryWithoutDiscarded: a demo that discarded nothing does not say its discarded jobs
// failed on purpose.
func TestDemoSummaryWithoutDiscarded(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	printDemoSummary(&out, &demoSummary{Jobs: 20, Inserted: 20, Done: 20, Finished: true,
		States: map[pronto.State]int{pronto.StateCompleted: 20}, Kinds: map[string]*demoKindResult{}}, " --database-url sqlite:x.db", false, palette{})
	if strings.Contains(out.String(), "discarded") {
		t.Fatalf("speaks of discarded jobs:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "pronto jobs list --database-url sqlite:x.db") {
		t.Fatalf("no command to inspect the jobs:\n%s", out.String())
	}
}

// TestDemoProgressLastFrame: in plain mode, the frame drawn as the display stops is not a repeat of
// the line before it.
func TestDemoProgressLastFrame(t *testing.T) {
	t.Parallel()
	c, err := pronto.NewClient(memory.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	p := &demoProgress{out: &out, client: c, stats: newDemoStats(nil), plan: &demoPlan{total: 20}, start: time.Now()}
	p.frame(false)
	p.frame(true)
	if n := strings.Count(out.String(), "\n"); n != 1 {
		t.Fatalf("%d lines:\n%s", n, out.String())
	}
}

// TestDemoPausedQueue: on a database where a queue the demo uses is paused, the demo says so at once
// instead of waiting out --duration.
func TestDemoPausedQueue(t *testing.T) {
	t.Parallel()
	db := []string{"--database-url", "sqlite:" + filepath.Join(t.TempDir(), "p.db")}
	run(t, with(db, "migrate", "up")...).ok(t)
	run(t, with(db, "queues", "pause", "media")...).ok(t)
	run(t, with(db, "demo", "--jobs", "20", "--duration", "20s")...).fails(t, ExitError, "queue media is paused")
}

// TestDatabaseFlagsEverywhere: version and completion accept the database flags (and ignore them);
// an explicitly empty --database-url and a named in-memory store are refused.
func TestDatabaseFlagsEverywhere(t *testing.T) {
	t.Parallel()
	run(t, "version", "--database-url", "postgres://u@127.0.0.1:1/x").ok(t)
	run(t, "completion", "bash", "--database-url", "memory:", "--schema", "s").ok(t)

	res := run(t, "jobs", "list", "--database-url", "").fails(t, ExitUsage, "empty database URL")
	if strings.Contains(res.stderr, "pronto.db") {
		t.Errorf("fell back to the default:\n%s", res)
	}

	var stderr bytes.Buffer
	code := Run(context.Background(), []string{"jobs", "list", "--database-url", "memory:foo"}, Env{Stderr: &stderr})
	if code != ExitUsage || !strings.Contains(stderr.String(), "memory: alone") {
		t.Fatalf("memory:foo without SharedMemory: exit %d, %s", code, stderr.String())
	}
}

// TestTenantsGetShowsEnqueueLimits: the text output of tenants get shows the enqueue limits, as
// --json does.
func TestTenantsGetShowsEnqueueLimits(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db []string) {
		run(t, with(db, "tenants", "set", "acme", "--max-queue-depth", "10", "--enqueue-rate", "100", "--enqueue-period", "1m")...).ok(t)
		res := run(t, with(db, "tenants", "get", "acme")...).ok(t)
		if !strings.Contains(res.stdout, "enqueue limits: max queue depth 10, enqueue rate 100/1m0s") {
			t.Fatalf("tenants get:\n%s", res)
		}
	})
}

// TestFlagPlaceholders: every flag that takes a value names it (N, DURATION, URL, ...), not with
// the flag package's generic value, string, int or float.
func TestFlagPlaceholders(t *testing.T) {
	t.Parallel()
	r := &runner{}
	var names []string
	for _, c := range r.commands() {
		names = append(names, c.name)
	}
	for _, g := range r.groups() {
		for _, c := range g.subs {
			names = append(names, c.name)
		}
	}
	for _, name := range names {
		res := run(t, append(strings.Fields(name), "--help")...).ok(t)
		for _, line := range strings.Split(res.stdout, "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 && strings.HasPrefix(f[0], "--") {
				switch f[1] {
				case "value", "string", "int", "float", "duration", "uint":
					t.Errorf("%s: %q", name, strings.TrimSpace(line))
				}
			}
		}
	}
}
