package pronto_test

// The chaos suite: worker processes killed, frozen and cut off from their database while jobs flow,
// on the real stores. Each test asserts outcomes (nothing lost, nothing stuck, duplicates only where
// a process died mid-run) and logs what it measured; docs/architecture.md ("Guarantees and their
// bounds") gathers the figures.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/pgcluster"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store/postgres"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// chaosInserter inserts chaos jobs at a steady rate until stopped, each Insert under a deadline.
type chaosInserter struct {
	mu      sync.Mutex
	acked   []string
	errs    int
	lastErr error
	maxCall time.Duration
	stop    chan struct{}
	done    chan struct{}
}

// startInserter inserts one job every interval through c, each call bounded by timeout.
func startInserter(c *pronto.Client, every, timeout time.Duration) *chaosInserter {
	ins := &chaosInserter{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(ins.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ins.stop:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			began := time.Now()
			row, err := c.Insert(ctx, chaosArgs{SleepMS: 100 + rand.IntN(400)}, &pronto.InsertOpts{MaxAttempts: 20})
			took := time.Since(began)
			cancel()
			ins.mu.Lock()
			ins.maxCall = max(ins.maxCall, took)
			if err != nil {
				ins.errs++
				ins.lastErr = err
			} else {
				ins.acked = append(ins.acked, row.ID)
			}
			ins.mu.Unlock()
		}
	}()
	return ins
}

// errors is how many inserts have failed so far.
func (ins *chaosInserter) errors() int {
	ins.mu.Lock()
	defer ins.mu.Unlock()
	return ins.errs
}

// finish stops the inserter and returns the acknowledged ids.
func (ins *chaosInserter) finish() []string {
	close(ins.stop)
	<-ins.done
	ins.mu.Lock()
	defer ins.mu.Unlock()
	return append([]string(nil), ins.acked...)
}

// waitAllCompleted waits until the store holds at least want jobs, all completed. Errors of the
// count query are retried: the database may just have come back.
func waitAllCompleted(t *testing.T, count func(ctx context.Context) (total, completed int, err error), want int) {
	t.Helper()
	var total, completed int
	var err error
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		total, completed, err = count(ctx)
		cancel()
		if err == nil && total >= want && completed == total {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("jobs not all completed within 90s: %d of %d completed (%d acknowledged), last error %v", completed, total, want, err)
}

func countPostgres(pool *pgxpool.Pool, schema string) func(ctx context.Context) (int, int, error) {
	return func(ctx context.Context) (total, completed int, err error) {
		err = pool.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE state = 'completed') FROM "+schema+".jobs").Scan(&total, &completed)
		return total, completed, err
	}
}

// TestChaosKilledWorkers: three worker processes on PostgreSQL under a steady insert rate, one
// SIGKILLed every few seconds and replaced. Every job completes, none is left active, and a job runs
// again (and its work is duplicated, per the ledger the workers write) only when it was in flight in
// a killed process.
func TestChaosKilledWorkers(t *testing.T) {
	t.Parallel()
	ts, pool, env := chaosPostgres(t)

	live := make([]*chaosProc, 3)
	for i := range live {
		live[i] = startChaosWorker(t, kindPostgres, env...)
	}
	procs := append([]*chaosProc(nil), live...)
	admin, err := pronto.NewClient(ts.Store, nil)
	require.NoError(t, err)
	ins := startInserter(admin, 40*time.Millisecond, 30*time.Second)

	type kill struct {
		at    time.Time
		p     *chaosProc
		leads bool
	}
	var kills []kill
	for k := range 4 {
		time.Sleep(3 * time.Second)
		// The leader at even kills, another process at odd ones.
		v := 0
		for i, p := range live {
			if p.leads() == (k%2 == 0) {
				v = i
				break
			}
		}
		victim := live[v]
		victim.killBusy(t)
		kills = append(kills, kill{time.Now(), victim, victim.leads()})
		live[v] = startChaosWorker(t, kindPostgres, env...)
		procs = append(procs, live[v])
	}
	acked := ins.finish()
	require.Zero(t, ins.errors(), "no insert fails while workers die (last error: %v)", ins.lastErr)
	waitAllCompleted(t, countPostgres(pool, ts.schema), len(acked))
	for _, p := range live {
		p.stop(t)
	}

	jobs := allJobs(t, admin)
	f := checkChaos(t, acked, jobs, readPostgresLedger(t, pool, ts.schema), procs, true)
	require.Zero(t, f.Lost)
	var rec []string
	var held []int
	for _, k := range kills {
		d, n := backInPlay(k.p, k.at, jobs, procs)
		held = append(held, n)
		switch {
		case n == 0:
			rec = append(rec, "-")
		case k.leads:
			rec = append(rec, fmt.Sprintf("%.2fs(leader)", d.Seconds()))
		default:
			rec = append(rec, fmt.Sprintf("%.2fs", d.Seconds()))
		}
	}
	t.Logf("postgres, %d kills: %d jobs, %d lost, %d reruns, %d duplicates, %d runs in flight at the kills %v; "+
		"the killed process's jobs all started again elsewhere after %v (lease %s, leader TTL %s)",
		len(kills), f.Jobs, f.Lost, f.Reruns, f.Duplicates, f.InFlight, held, rec, chaosLease, chaosLeaderTTL)
}

// TestChaosStoppedWorker: a worker process frozen (SIGSTOP) past its lease, then thawed (SIGCONT)
// while its jobs run again elsewhere: its stale run is cancelled, and nothing it does afterwards is
// recorded as the outcome, neither for a run still working when it thaws nor for one whose work came
// due while it was frozen, although the jobs are still active (under the new claim) when the stale
// outcomes arrive: only the fence can refuse them.
func TestChaosStoppedWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ts, pool, env := chaosPostgres(t)

	w1 := startChaosWorker(t, kindPostgres, env...)
	admin, err := pronto.NewClient(ts.Store, nil)
	require.NoError(t, err)
	// Attempt 1 of "working" outlasts the whole test; attempt 1 of "due" ends while w1 is frozen.
	// Attempt 2 of each lasts long enough that w1 thaws and reports while it runs.
	const secondRun = 5000
	working, err := admin.Insert(ctx, chaosArgs{SleepMS: secondRun, FirstSleepMS: 120_000}, nil)
	require.NoError(t, err)
	due, err := admin.Insert(ctx, chaosArgs{SleepMS: secondRun, FirstSleepMS: 1000}, nil)
	require.NoError(t, err)
	w1.waitLine(t, "start "+working.ID+" 1", 30*time.Second)
	w1.waitLine(t, "start "+due.ID+" 1", 30*time.Second)
	require.NoError(t, w1.cmd.Process.Signal(syscall.SIGSTOP))
	stoppedAt := time.Now()
	thawed := false
	t.Cleanup(func() {
		if !thawed {
			_ = w1.cmd.Process.Signal(syscall.SIGCONT)
		}
	})

	w2 := startChaosWorker(t, kindPostgres, env...)
	w2.waitLine(t, "start "+working.ID+" 2", 60*time.Second)
	w2.waitLine(t, "start "+due.ID+" 2", 60*time.Second)
	rerunAfter := time.Since(stoppedAt)

	require.NoError(t, w1.cmd.Process.Signal(syscall.SIGCONT))
	thawed = true
	contAt := time.Now()
	w1.waitLine(t, "cancelled "+working.ID+" 1", 30*time.Second)
	cancelledAfter := time.Since(contAt)
	// The second runs still go on, so the stale outcomes meet active jobs (a finished job refuses
	// any outcome, and the fence would go untested).
	require.False(t, w2.has("done "+working.ID+" 2") || w2.has("done "+due.ID+" 2"),
		"the second runs are still running when the stale run is cancelled")
	for _, id := range []string{working.ID, due.ID} {
		require.Eventually(t, func() bool {
			j, err := admin.JobGet(ctx, id)
			require.NoError(t, err)
			return j.State == pronto.StateCompleted
		}, 60*time.Second, 20*time.Millisecond, "job %s completes", id)
	}
	// A clean stop makes w1 write every outcome it still means to write before it exits.
	w1.stop(t)
	w2.stop(t)

	ledger := readPostgresLedger(t, pool, ts.schema)
	for _, id := range []string{working.ID, due.ID} {
		j, err := admin.JobGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, pronto.StateCompleted, j.State)
		require.Equal(t, 2, j.Attempt, "job %s: the run of w2 decided the outcome", id)
		require.Equal(t, w2.pid, resultPID(j), "job %s: the result is w2's", id)
		require.Len(t, j.Errors, 1, "job %s: only the lost lease is in its history, nothing the stale run reported", id)
		require.Equal(t, "lease_expired", j.Errors[0].Type)
		require.Equal(t, 1, j.Errors[0].Attempt)
		require.Contains(t, ledger[id], ledgerRow{Attempt: 2, PID: w2.pid})
	}
	require.Equal(t, []ledgerRow{{Attempt: 2, PID: w2.pid}}, ledger[working.ID], "the cancelled stale run did no work")
	t.Logf("frozen worker: its jobs started again elsewhere %.2fs after SIGSTOP (lease %s); stale run cancelled %.2fs "+
		"after SIGCONT; the run that came due while frozen finished its work too: %v (its outcome not recorded either way)",
		rerunAfter.Seconds(), chaosLease, cancelledAfter.Seconds(), len(ledger[due.ID]) > 1)
}

// TestChaosPostgresRestarts: PostgreSQL (a private cluster) shut down fast, then crashed
// (immediate), each time for a second, under a steady insert rate with two worker processes. Inserts
// during the outage fail within their deadline instead of hanging, the workers recover by
// themselves, and every acknowledged job completes.
func TestChaosPostgresRestarts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := pgcluster.Start(t)
	const schema = "chaos"
	cfg, err := pgxpool.ParseConfig(cl.URL())
	require.NoError(t, err)
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := postgres.New(pool, postgres.Config{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	_, err = pool.Exec(ctx, fmt.Sprintf(chaosLedgerDDL, schema+"."))
	require.NoError(t, err)
	env := []string{"PRONTO_TEST_DATABASE_URL=" + cl.URL(), "PRONTO_TEST_SCHEMA=" + schema}
	procs := []*chaosProc{startChaosWorker(t, kindPostgres, env...), startChaosWorker(t, kindPostgres, env...)}
	admin, err := pronto.NewClient(s, nil)
	require.NoError(t, err)

	const insertTimeout = time.Second
	ins := startInserter(admin, 25*time.Millisecond, insertTimeout)
	var probes []string
	var report []string
	time.Sleep(2 * time.Second)
	for _, mode := range []string{"fast", "immediate"} {
		before := ins.errors()
		require.NoError(t, cl.Down(mode))
		time.Sleep(time.Second)
		require.NoError(t, cl.Up())
		upAt := time.Now()
		// The first insert acknowledged after the server is back, and when a worker completes it.
		var probe *pronto.JobRow
		for probe == nil {
			require.Less(t, time.Since(upAt), 60*time.Second, "inserts work again after the restart")
			ictx, cancel := context.WithTimeout(ctx, insertTimeout)
			probe, _ = admin.Insert(ictx, chaosArgs{SleepMS: 1}, &pronto.InsertOpts{MaxAttempts: 20})
			cancel()
		}
		insertBack := time.Since(upAt)
		probes = append(probes, probe.ID)
		for {
			require.Less(t, time.Since(upAt), 60*time.Second, "the workers work again after the restart")
			j, err := admin.JobGet(ctx, probe.ID)
			if err == nil && j.State == pronto.StateCompleted {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		workBack := time.Since(upAt)
		outage := ins.errors() - before
		require.Positive(t, outage, "inserts during the %s outage return errors", mode)
		report = append(report, fmt.Sprintf("%s: %d inserts failed, inserts back %.2fs and jobs worked %.2fs after the server",
			mode, outage, insertBack.Seconds(), workBack.Seconds()))
		time.Sleep(2 * time.Second)
	}
	acked := ins.finish()
	require.Less(t, ins.maxCall, insertTimeout+5*time.Second, "no insert hung past its deadline")
	acked = append(acked, probes...)
	waitAllCompleted(t, countPostgres(pool, schema), len(acked))
	for _, p := range procs {
		require.False(t, p.exited(), "worker %d survived the restarts", p.pid)
		p.stop(t)
	}

	jobs := allJobs(t, admin)
	f := checkChaos(t, acked, jobs, readPostgresLedger(t, pool, schema), procs, false)
	require.Zero(t, f.Lost)
	why := map[string]int{} // why attempts failed: the runs the outages cut short
	for _, j := range jobs {
		for _, e := range j.Errors {
			why[e.Type]++
		}
	}
	t.Logf("postgres restarts: %d jobs, %d lost, %d reruns (failed attempts by type: %v), %d duplicates, slowest insert %.2fs (deadline %s); %v",
		f.Jobs, f.Lost, f.Reruns, why, f.Duplicates, ins.maxCall.Seconds(), insertTimeout, report)
}

// TestChaosSQLiteKilledProcess: two worker processes share an SQLite file while a third (this
// test) inserts; one worker is SIGKILLed mid-run. Nothing is lost, its jobs run again in the other,
// only they are duplicated, and the file passes PRAGMA integrity_check.
func TestChaosSQLiteKilledProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ts := newTestStore(t, kindSQLite)
	db := ts.Store.(*sqlite.Store).DB()
	_, err := db.ExecContext(ctx, fmt.Sprintf(chaosLedgerDDL, ""))
	require.NoError(t, err)
	env := []string{"PRONTO_TEST_PATH=" + ts.path}
	w1 := startChaosWorker(t, kindSQLite, env...)
	w2 := startChaosWorker(t, kindSQLite, env...)
	admin, err := pronto.NewClient(ts.Store, nil)
	require.NoError(t, err)
	ins := startInserter(admin, 40*time.Millisecond, 30*time.Second)

	time.Sleep(3 * time.Second)
	w1.killBusy(t)
	killedAt := time.Now()
	time.Sleep(3 * time.Second)
	acked := ins.finish()
	require.Zero(t, ins.errors(), "no insert fails (last error: %v)", ins.lastErr)
	waitAllCompleted(t, func(ctx context.Context) (total, completed int, err error) {
		err = db.QueryRowContext(ctx, "SELECT count(*), count(*) FILTER (WHERE state = 'completed') FROM pronto_jobs").Scan(&total, &completed)
		return total, completed, err
	}, len(acked))
	w2.stop(t)

	var integrity []string
	rows, err := db.QueryContext(ctx, "PRAGMA integrity_check")
	require.NoError(t, err)
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		integrity = append(integrity, line)
	}
	require.NoError(t, rows.Err())
	require.NoError(t, rows.Close())
	require.Equal(t, []string{"ok"}, integrity)

	jobs := allJobs(t, admin)
	f := checkChaos(t, acked, jobs, readSQLiteLedger(t, db), []*chaosProc{w1, w2}, true)
	require.Zero(t, f.Lost)
	rec, held := backInPlay(w1, killedAt, jobs, []*chaosProc{w1, w2})
	leader := ""
	if w1.leads() {
		leader = ", it led"
	}
	t.Logf("sqlite, one of two processes killed: %d jobs, %d lost, %d reruns, %d duplicates, %d in flight at the kill%s, "+
		"all started again in the other after %.2fs (lease %s); integrity_check ok", f.Jobs, f.Lost, f.Reruns, f.Duplicates, held,
		leader, rec.Seconds(), chaosLease)
}

// ojsCall posts body to the OJS server at addr and returns the status and the decoded answer.
func ojsCall(t *testing.T, addr, path, body string) (int, map[string]any) {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Post("http://"+addr+"/ojs/v1"+path, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var m map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&m), "%s answers JSON", path)
	return resp.StatusCode, m
}

// ojsFetch fetches at most one job of the default queue as worker from the server at addr, with a
// one-second visibility timeout; nil when there is none.
func ojsFetch(t *testing.T, addr, worker string) map[string]any {
	t.Helper()
	status, m := ojsCall(t, addr, "/workers/fetch", `{"queues":["default"],"worker_id":"`+worker+`","visibility_timeout_ms":1000}`)
	require.Equal(t, http.StatusOK, status, "fetch: %v", m)
	jobs, _ := m["jobs"].([]any)
	if len(jobs) == 0 {
		return nil
	}
	return jobs[0].(map[string]any)
}

// TestChaosStaleHTTPAck: an OJS worker fetches a job from one server process, which is then
// SIGKILLed; the worker's lease runs out and the job is fetched again, from a second server process,
// by a worker under the same worker id (a restarted worker). Every stale ack and nack (by claim
// token, or naming no claim at all) gets 409 and leaves the job to the current claim, whose ack
// decides it: the fence lives in the store, not in the memory of the server that handed the claim
// out.
func TestChaosStaleHTTPAck(t *testing.T) {
	for _, kind := range []storeKind{kindPostgres, kindSQLite} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ts := newTestStore(t, kind)
			env := []string{chaosRoleEnv + "=server", "PRONTO_TEST_DATABASE_URL=" + testdb.URL(),
				"PRONTO_TEST_SCHEMA=" + ts.schema, "PRONTO_TEST_PATH=" + ts.path}
			a := startChaosWorker(t, kind, env...)
			b := startChaosWorker(t, kind, env...)
			admin, err := pronto.NewClient(ts.Store, nil)
			require.NoError(t, err)
			job, err := admin.Insert(ctx, chaosArgs{}, nil)
			require.NoError(t, err)

			fetchedAt := time.Now()
			first := ojsFetch(t, a.after("listening "), "w1")
			require.NotNil(t, first)
			require.Equal(t, job.ID, first["id"])
			require.Equal(t, 1.0, first["attempt"])
			staleToken, _ := first["claim_token"].(string)
			require.NotEmpty(t, staleToken, "the fetch answer carries a claim token")
			a.kill(t)
			killedAt := time.Now()

			var second map[string]any
			for second == nil {
				require.Less(t, time.Since(killedAt), 30*time.Second, "the job is handed out again after its lease")
				second = ojsFetch(t, b.after("listening "), "w1")
				if second == nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
			refetchedAfter := time.Since(fetchedAt)
			require.Equal(t, job.ID, second["id"])
			require.Equal(t, 2.0, second["attempt"])
			require.NotEqual(t, staleToken, second["claim_token"])

			for _, body := range []string{
				`{"job_id":"` + job.ID + `","worker_id":"w1","claim_token":"` + staleToken + `","result":"stale"}`,
				`{"job_id":"` + job.ID + `","claim_token":"` + staleToken + `","result":"stale"}`,
				`{"job_id":"` + job.ID + `","result":"stale"}`,
			} {
				status, m := ojsCall(t, b.after("listening "), "/workers/ack", body)
				require.Equal(t, http.StatusConflict, status, "stale ack %s: %v", body, m)
				e, _ := m["error"].(map[string]any)
				require.Equal(t, "conflict", e["code"], "%v", m)
				require.NotEmpty(t, e["message"])
				status, m = ojsCall(t, b.after("listening "), "/workers/nack",
					strings.TrimSuffix(body, `,"result":"stale"}`)+`,"error":{"message":"stale"}}`)
				require.Equal(t, http.StatusConflict, status, "stale nack of %s: %v", body, m)
			}
			status, m := ojsCall(t, b.after("listening "), "/workers/ack", `{"job_id":"`+job.ID+`","worker_id":"w1","claim_token":"`+
				second["claim_token"].(string)+`","result":"current"}`)
			require.Equal(t, http.StatusOK, status, "the current claim's ack: %v", m)

			j, err := admin.JobGet(ctx, job.ID)
			require.NoError(t, err)
			require.Equal(t, pronto.StateCompleted, j.State)
			require.Equal(t, 2, j.Attempt)
			require.JSONEq(t, `"current"`, string(j.Result))
			require.Len(t, j.Errors, 1)
			require.Equal(t, "lease_expired", j.Errors[0].Type)
			b.stop(t)
			t.Logf("%s: job fetched again %.2fs after the first fetch (visibility timeout 1s), from another server; 6 stale outcomes refused with 409",
				kind, refetchedAfter.Seconds())
		})
	}
}
