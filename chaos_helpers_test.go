package pronto_test

// The chaos suite's worker process and the checks every chaos test makes. The tests themselves are
// in chaos_test.go; docs/architecture.md ("Guarantees and their bounds") states what they prove.

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/server"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/postgres"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// chaosWorkerEnv, set to "postgres" or "sqlite", makes the test binary a chaos worker process (see
// TestMain). It reads PRONTO_TEST_DATABASE_URL (through testdb) and PRONTO_TEST_SCHEMA, or
// PRONTO_TEST_PATH.
const chaosWorkerEnv = "PRONTO_CHAOS_WORKER"

// The chaos workers run with the default lease, rescue interval and leader TTL, so the recovery
// times the suite measures are those of a default client. Only the heartbeat is more frequent than
// the default (1 s): a live worker on a loaded machine (race detector, other tests) then keeps its
// leases through a stall of about 1.5 s, and never loses one to a late heartbeat.
const (
	chaosLease     = pronto.DefaultLeaseDuration
	chaosHeartbeat = 200 * time.Millisecond
	chaosRescue    = pronto.DefaultRescueInterval
	chaosLeaderTTL = pronto.DefaultLeaderTTL
)

// chaosArgs is the chaos suite's job: sleep, then write a ledger row.
type chaosArgs struct {
	SleepMS int `json:"sleep_ms"`
	// FirstSleepMS, when set, is attempt 1's sleep instead of SleepMS (a run that is to be stranded).
	FirstSleepMS int `json:"first_sleep_ms,omitempty"`
}

func (chaosArgs) Kind() string { return "chaos.work" }

// chaosLedgerDDL creates the ledger: one row per run that finished its work, written by the worker
// in a transaction of its own before the client records the outcome. Two rows for one job are two
// runs that both did the work: a duplicate.
const chaosLedgerDDL = `CREATE TABLE %schaos_ledger (job_id text NOT NULL, attempt integer NOT NULL, pid integer NOT NULL)`

// runChaosWorker is the worker process. It prints one line per event, unbuffered so that a SIGKILL
// loses none already printed: "ready CLIENT-ID", "start JOB ATTEMPT", "done JOB ATTEMPT" (ledger row
// written), "cancelled JOB ATTEMPT" (the run's context ended before its work did), "failed JOB
// ATTEMPT" (the ledger write failed), "stopped". It
// works until SIGKILL, or until SIGTERM stops its client cleanly.
func runChaosWorker(kind string) int {
	ctx := context.Background()
	pid := os.Getpid()
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(os.Stdout, format+"\n", args...)
	}
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "chaos worker:", err); return 1 }

	var s store.Store
	var ledger func(ctx context.Context, id string, attempt int) error
	switch kind {
	case "postgres":
		schema := os.Getenv("PRONTO_TEST_SCHEMA")
		pool := testdb.NewPool(&helperTB{}, 6)
		ps, err := postgres.New(pool, postgres.Config{Schema: schema})
		if err != nil {
			return fail(err)
		}
		s = ps
		ledger = func(ctx context.Context, id string, attempt int) error {
			_, err := pool.Exec(ctx, "INSERT INTO "+schema+".chaos_ledger (job_id, attempt, pid) VALUES ($1, $2, $3)", id, attempt, pid)
			return err
		}
	case "sqlite":
		ss, err := sqlite.Open(ctx, os.Getenv("PRONTO_TEST_PATH"))
		if err != nil {
			return fail(err)
		}
		s = ss
		ledger = func(ctx context.Context, id string, attempt int) error {
			_, err := ss.DB().ExecContext(ctx, "INSERT INTO chaos_ledger (job_id, attempt, pid) VALUES (?, ?, ?)", id, attempt, pid)
			return err
		}
	default:
		return fail(fmt.Errorf("unknown store %q", kind))
	}

	if os.Getenv(chaosRoleEnv) == "server" {
		return runChaosServer(s, say, fail)
	}

	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[chaosArgs]) error {
		say("start %s %d", j.ID, j.Attempt)
		d := j.Args.SleepMS
		if j.Attempt == 1 && j.Args.FirstSleepMS > 0 {
			d = j.Args.FirstSleepMS
		}
		select {
		case <-time.After(time.Duration(d) * time.Millisecond):
		case <-ctx.Done():
			say("cancelled %s %d", j.ID, j.Attempt)
			return ctx.Err()
		}
		// Bounded, but well beyond SQLite's busy timeout (10 s): while the database is down this
		// fails and the attempt is retried; on a slow machine it waits.
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := ledger(lctx, j.ID, j.Attempt); err != nil {
			say("failed %s %d", j.ID, j.Attempt)
			return fmt.Errorf("ledger: %w", err)
		}
		if err := pronto.RecordResult(ctx, map[string]int{"pid": pid}); err != nil {
			return err
		}
		say("done %s %d", j.ID, j.Attempt)
		return nil
	}))
	queue := pronto.QueueConfig{MaxWorkers: 8}
	if n, err := strconv.Atoi(os.Getenv(chaosWorkersEnv)); err == nil {
		queue.MaxWorkers = n
	}
	if n, err := strconv.Atoi(os.Getenv(chaosPrefetchEnv)); err == nil {
		queue.Prefetch = n
	}
	cfg := fastConfig(workers, map[string]pronto.QueueConfig{pronto.DefaultQueue: queue})
	cfg.ID = fmt.Sprintf("chaos-%d", pid)
	cfg.LeaseDuration = chaosLease
	cfg.HeartbeatInterval = chaosHeartbeat
	cfg.RescueInterval = chaosRescue
	cfg.LeaderTTL = chaosLeaderTTL
	c, err := pronto.NewClient(s, cfg)
	if err != nil {
		return fail(err)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	if err := c.Start(ctx); err != nil {
		return fail(err)
	}
	say("ready %s", cfg.ID)
	// Leadership changes, so that the tests know whether a process they kill leads.
	go func() {
		leads := false
		for {
			if now := c.IsLeader(); now != leads {
				leads = now
				if leads {
					say("leader")
				} else {
					say("follower")
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	<-term
	stopCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := c.Stop(stopCtx); err != nil {
		return fail(err)
	}
	say("stopped")
	return 0
}

// chaosPostgres returns a fresh PostgreSQL store with the chaos ledger in its schema, its pool, and
// the environment a chaos worker process needs to open the same store.
func chaosPostgres(t *testing.T) (*testStore, *pgxpool.Pool, []string) {
	t.Helper()
	ts := newTestStore(t, kindPostgres)
	pool := ts.Store.(*postgres.Store).Pool()
	_, err := pool.Exec(context.Background(), fmt.Sprintf(chaosLedgerDDL, ts.schema+"."))
	require.NoError(t, err)
	return ts, pool, []string{"PRONTO_TEST_DATABASE_URL=" + testdb.URL(), "PRONTO_TEST_SCHEMA=" + ts.schema}
}

// chaosWorkersEnv and chaosPrefetchEnv set a chaos worker's MaxWorkers (default 8) and Prefetch
// (default 0).
const (
	chaosWorkersEnv  = "PRONTO_CHAOS_WORKERS"
	chaosPrefetchEnv = "PRONTO_CHAOS_PREFETCH"
)

// chaosRoleEnv set to "server" makes a chaos worker process an OJS HTTP server instead (no workers:
// OJS workers fetch from it over HTTP).
const chaosRoleEnv = "PRONTO_CHAOS_ROLE"

// runChaosServer serves the OJS HTTP API over s on a free port of 127.0.0.1, printing
// "listening ADDR" and then "ready CLIENT-ID", until SIGTERM. Its client rescues expired leases
// quickly when it leads.
func runChaosServer(s store.Store, say func(string, ...any), fail func(error) int) int {
	ctx := context.Background()
	c, err := pronto.NewClient(s, &pronto.Config{ID: fmt.Sprintf("chaos-%d", os.Getpid()),
		RescueInterval: 100 * time.Millisecond, LeaderTTL: time.Second})
	if err != nil {
		return fail(err)
	}
	srv, err := server.New(server.Config{Client: c})
	if err != nil {
		return fail(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	if err := c.Start(ctx); err != nil {
		return fail(err)
	}
	hs := server.NewHTTPServer(ln.Addr().String(), srv)
	go func() { _ = hs.Serve(ln) }()
	say("listening %s", ln.Addr())
	say("ready %s", c.ID())
	<-term
	stopCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_ = hs.Shutdown(stopCtx)
	if err := c.Stop(stopCtx); err != nil {
		return fail(err)
	}
	say("stopped")
	return 0
}

// chaosProc is a running chaos worker process and what it printed.
type chaosProc struct {
	cmd    *exec.Cmd
	pid    int
	id     string // its client's ID
	killed bool   // ended by SIGKILL
	mu     sync.Mutex
	lines  []string
	times  []time.Time   // when each line was read
	eof    chan struct{} // closed when its stdout is drained
}

// startChaosWorker starts a chaos worker process on the given store kind and waits until its client
// has started.
func startChaosWorker(t *testing.T, kind storeKind, env ...string) *chaosProc {
	t.Helper()
	p := startTestProcess(t, "^$", append([]string{chaosWorkerEnv + "=" + string(kind)}, env...))
	p.waitLine(t, "ready ", 60*time.Second)
	p.id = fmt.Sprintf("chaos-%d", p.pid)
	return p
}

// startTestProcess re-executes the test binary running the tests matching run, with env added to
// this process's, and records its output lines; the test's cleanup kills it (stopped or not).
func startTestProcess(t *testing.T, run string, env []string) *chaosProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+run)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &chaosProc{cmd: cmd, pid: cmd.Process.Pid, eof: make(chan struct{})}
	go func() {
		defer close(p.eof)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.times = append(p.times, time.Now())
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-p.eof
		_ = cmd.Wait()
	})
	return p
}

// after returns what follows prefix on the first line that starts with it ("" if none).
func (p *chaosProc) after(prefix string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.lines {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			return rest
		}
	}
	return ""
}

// has reports whether the process printed a line starting with prefix.
func (p *chaosProc) has(prefix string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

// waitLine waits until the process prints a line starting with prefix; it fails the test if the
// process ends first or the wait times out.
func (p *chaosProc) waitLine(t *testing.T, prefix string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !p.has(prefix) {
		select {
		case <-p.eof:
			if p.has(prefix) {
				return
			}
			t.Fatalf("worker %d ended before printing %q", p.pid, prefix)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker %d did not print %q within %s", p.pid, prefix, timeout)
		}
	}
}

// kill SIGKILLs the process (stopped or not) and waits until it is gone and its output read.
func (p *chaosProc) kill(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.eof
	_ = p.cmd.Wait()
	p.killed = true
}

// stop SIGTERMs the process (its client stops cleanly) and waits for it to exit.
func (p *chaosProc) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.eof:
	case <-time.After(60 * time.Second):
		t.Fatalf("worker %d did not stop within 60s of SIGTERM", p.pid)
	}
	require.NoError(t, p.cmd.Wait(), "worker %d exits cleanly", p.pid)
	require.True(t, p.has("stopped"))
}

// exited reports whether the process has ended (its stdout closed).
func (p *chaosProc) exited() bool {
	select {
	case <-p.eof:
		return true
	default:
		return false
	}
}

// leads reports whether the process's last word on leadership was that it leads.
func (p *chaosProc) leads() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	leads := false
	for _, l := range p.lines {
		switch l {
		case "leader":
			leads = true
		case "follower":
			leads = false
		}
	}
	return leads
}

// chaosRun is a run a worker process started.
type chaosRun struct {
	Attempt int
	At      time.Time // when the parent read its "start" line
}

// runs returns the runs the process started, by job id.
func (p *chaosProc) runs() map[string][]chaosRun {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := map[string][]chaosRun{}
	for i, l := range p.lines {
		f := strings.Fields(l)
		if len(f) == 3 && f[0] == "start" {
			a, _ := strconv.Atoi(f[2])
			m[f[1]] = append(m[f[1]], chaosRun{a, p.times[i]})
		}
	}
	return m
}

// busy reports whether the process has a run it started and has not ended (printed done or
// cancelled for).
func (p *chaosProc) busy() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	open := map[string]bool{}
	for _, l := range p.lines {
		f := strings.Fields(l)
		if len(f) != 3 {
			continue
		}
		switch f[0] {
		case "start":
			open[f[1]+" "+f[2]] = true
		case "done", "cancelled", "failed":
			delete(open, f[1]+" "+f[2])
		}
	}
	return len(open) > 0
}

// killBusy SIGKILLs the process once it has a run in flight (or after 10 s without one), so that the
// kill strands work.
func (p *chaosProc) killBusy(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !p.busy() && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	p.kill(t)
}

// inFlight returns the runs of a killed process whose outcome was never recorded: the job's
// recorded outcome is another run's.
func (p *chaosProc) inFlight(jobs map[string]*pronto.JobRow) map[string][]chaosRun {
	m := map[string][]chaosRun{}
	for id, runs := range p.runs() {
		j := jobs[id]
		for _, r := range runs {
			if j == nil || resultPID(j) != p.pid || j.Attempt != r.Attempt {
				m[id] = append(m[id], r)
			}
		}
	}
	return m
}

// backInPlay is how long after a kill at `at` the last of the killed process's stranded runs had
// its job started again by another process, and how many runs were stranded.
func backInPlay(victim *chaosProc, at time.Time, jobs map[string]*pronto.JobRow, procs []*chaosProc) (time.Duration, int) {
	var worst time.Duration
	n := 0
	for id, stranded := range victim.inFlight(jobs) {
		for _, s := range stranded {
			n++
			var first time.Time
			for _, p := range procs {
				for _, r := range p.runs()[id] {
					if r.Attempt > s.Attempt && (first.IsZero() || r.At.Before(first)) {
						first = r.At
					}
				}
			}
			if !first.IsZero() {
				worst = max(worst, first.Sub(at))
			}
		}
	}
	return worst, n
}

// ledgerRow is one run that did the work.
type ledgerRow struct {
	Attempt, PID int
}

func readPostgresLedger(t *testing.T, pool *pgxpool.Pool, schema string) map[string][]ledgerRow {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT job_id, attempt, pid FROM "+schema+".chaos_ledger")
	require.NoError(t, err)
	defer rows.Close()
	m := map[string][]ledgerRow{}
	for rows.Next() {
		var id string
		var r ledgerRow
		require.NoError(t, rows.Scan(&id, &r.Attempt, &r.PID))
		m[id] = append(m[id], r)
	}
	require.NoError(t, rows.Err())
	return m
}

func readSQLiteLedger(t *testing.T, db *sql.DB) map[string][]ledgerRow {
	t.Helper()
	rows, err := db.Query("SELECT job_id, attempt, pid FROM chaos_ledger")
	require.NoError(t, err)
	defer rows.Close()
	m := map[string][]ledgerRow{}
	for rows.Next() {
		var id string
		var r ledgerRow
		require.NoError(t, rows.Scan(&id, &r.Attempt, &r.PID))
		m[id] = append(m[id], r)
	}
	require.NoError(t, rows.Err())
	return m
}

// allJobs lists every job of the store, by id.
func allJobs(t *testing.T, c *pronto.Client) map[string]*pronto.JobRow {
	t.Helper()
	m := map[string]*pronto.JobRow{}
	p := &pronto.JobListParams{Limit: 1000}
	for {
		res, err := c.JobList(context.Background(), p)
		require.NoError(t, err)
		for _, j := range res.Jobs {
			m[j.ID] = j
		}
		if res.Next == "" {
			return m
		}
		p.Cursor = res.Next
	}
}

// resultPID is the pid a job's recorded outcome came from (its worker's result), 0 if none.
func resultPID(j *pronto.JobRow) int {
	var r struct {
		PID int `json:"pid"`
	}
	_ = json.Unmarshal(j.Result, &r)
	return r.PID
}

// chaosFigures are what a chaos run measured.
type chaosFigures struct {
	Jobs       int // jobs in the store
	Lost       int // acknowledged inserts that never completed
	Reruns     int // jobs that ran more than one attempt
	Duplicates int // extra ledger rows: runs whose work was done again by a later run
	InFlight   int // runs in killed processes whose outcome was never recorded
}

// checkChaos checks what every chaos run must leave: every acknowledged job exists and completed
// (none lost, none stuck active), and the run whose outcome was recorded wrote its ledger row. With
// strict set (no database crash), it checks too that a job ran again only when the process running
// it was killed (its run in flight at the kill), that every failed attempt is a lease_expired one,
// that no attempt number did its work twice, and that duplicate work came only from killed processes.
func checkChaos(t *testing.T, acked []string, jobs map[string]*pronto.JobRow, ledger map[string][]ledgerRow,
	procs []*chaosProc, strict bool) chaosFigures {
	t.Helper()
	f := chaosFigures{Jobs: len(jobs)}
	for _, id := range acked {
		j, ok := jobs[id]
		if !ok || j.State != pronto.StateCompleted {
			f.Lost++
			t.Errorf("acknowledged job %s lost or not completed: %+v", id, j)
		}
	}
	killed := map[int]bool{}
	for _, p := range procs {
		killed[p.pid] = p.killed
	}
	for id, j := range jobs {
		require.Equal(t, pronto.StateCompleted, j.State, "job %s (none stuck in active)", id)
		pid := resultPID(j)
		require.NotZero(t, pid, "job %s has its worker's result", id)
		rows := ledger[id]
		require.Contains(t, rows, ledgerRow{Attempt: j.Attempt, PID: pid},
			"job %s: the run whose outcome was recorded (attempt %d in %d) wrote its ledger row", id, j.Attempt, pid)
		if strict {
			// (A database crash can lose a claim and give its attempt number to a second run, so
			// only without one is each attempt's work done at most once.)
			seen := map[int]bool{}
			for _, r := range rows {
				require.False(t, seen[r.Attempt], "job %s: attempt %d did its work twice: %v", id, r.Attempt, rows)
				seen[r.Attempt] = true
				if r.PID != pid {
					require.True(t, killed[r.PID], "job %s: a run in live process %d did the work again (ledger %v)", id, r.PID, rows)
				}
			}
		}
		f.Duplicates += len(rows) - 1
		if j.Attempt > 1 {
			f.Reruns++
		}
		if strict {
			for _, e := range j.Errors {
				require.Equal(t, "lease_expired", e.Type, "job %s attempt %d failed only by losing its lease", id, e.Attempt)
			}
		}
	}
	if strict {
		// Every run a process started either recorded the job's outcome, or ran in a killed process
		// and its job ran again later.
		for _, p := range procs {
			for id, stranded := range p.inFlight(jobs) {
				j := jobs[id]
				require.NotNil(t, j, "job %s ran but is not in the store", id)
				for _, r := range stranded {
					require.True(t, p.killed, "job %s attempt %d in live process %d: its outcome was not recorded (job at attempt %d by %d)",
						id, r.Attempt, p.pid, j.Attempt, resultPID(j))
					require.Greater(t, j.Attempt, r.Attempt, "job %s, in flight in killed process %d, ran again", id, p.pid)
					f.InFlight++
				}
			}
		}
		require.LessOrEqual(t, f.Duplicates, f.InFlight, "duplicates only among runs in flight at a kill")
	}
	return f
}
