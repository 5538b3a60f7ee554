//go:build !benchworker

package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	redisstore "github.com/pronto-jobs/pronto/store/redis"
)

// The BullMQ comparison: the four bullmq-bench scenarios, run by BullMQ (through bullmq/run.mjs,
// with the npm package installed into a cache folder outside the repository on first use) and by
// pronto on the Redis store through its Go API, against the same Redis, alternating, counting only
// the measured window. Host load is sampled before and after each run; CPU seconds are the
// driver's (the node process, or this process for pronto) and the Redis server's.

//go:embed bullmq/run.mjs
var bullmqScript []byte

// bullmqScenarios are bullmq-bench's four scenarios.
var bullmqScenarios = []string{"queue-add", "queue-add-bulk", "worker-generic", "worker-concurrent"}

// bullmqDir installs BullMQ 5 into the cache folder (once) and writes the driver script there.
func bullmqDir() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "pronto-bench", "bullmq")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "bullmq")); err != nil {
		if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name":"pronto-bench-bullmq","private":true,"type":"module"}`), 0o644); err != nil {
			return "", err
		}
		cmd := exec.Command("npm", "install", "--no-audit", "--no-fund", "bullmq@5")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("npm install bullmq@5 in %s: %v\n%s", dir, err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "run.mjs"), bullmqScript, 0o644); err != nil {
		return "", err
	}
	return dir, nil
}

// loadavg returns the 1-minute load average.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

// redisCPU returns the Redis server's CPU seconds so far.
func redisCPU(ctx context.Context, rdb *goredis.Client) float64 {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0
	}
	var total float64
	for _, l := range strings.Split(info, "\r\n") {
		for _, k := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(l, k); ok {
				var f float64
				_, _ = fmt.Sscanf(v, "%g", &f)
				total += f
			}
		}
	}
	return total
}

func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// bullmqResult is one measured run.
type bullmqResult struct {
	jobsPerSec         float64
	driverCPU, srvCPU  float64
	loadBefore, loadAt string
	// perJob (pronto, with --bullmq-profile) is the Redis commands per measured job.
	perJob string
}

var bullmqPrefetch = flag.Int("bullmq-prefetch", 0, "with --bullmq: pronto-redis's consumers claim up to this many jobs beyond their free workers (QueueConfig.Prefetch); 0, the default, is pronto's default and BullMQ's way (a worker fetches only when free)")

var bullmqProfile = flag.String("bullmq-profile", "", "with --bullmq: write a Go CPU profile of each pronto-redis run into this `DIR`, and print the Redis commands per job (INFO commandstats; use a Redis of its own, REDIS_ADDR, or other clients' commands count too)")

// startProfile starts a CPU profile of the pronto side of a run when --bullmq-profile is set.
func startProfile(scenario string) (stop func(), err error) {
	if *bullmqProfile == "" {
		return func() {}, nil
	}
	if err := os.MkdirAll(*bullmqProfile, 0o755); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(*bullmqProfile, "pronto-"+scenario+"-*.pprof")
	if err != nil {
		return nil, err
	}
	return profileInto(f)
}

// commandStats reads INFO commandstats: per command, calls and microseconds of server time.
func commandStats(ctx context.Context, rdb *goredis.Client) map[string][2]float64 {
	out := map[string][2]float64{}
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return out
	}
	for _, l := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(l, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var calls, usec float64
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				calls, _ = strconv.ParseFloat(v, 64)
			case "usec":
				usec, _ = strconv.ParseFloat(v, 64)
			}
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = [2]float64{calls, usec}
	}
	return out
}

// perJobStats formats the commands between two readings per job: "evalsha 1.00 (38 µs)", busiest first.
func perJobStats(a, b map[string][2]float64, jobs int) string {
	type row struct {
		name        string
		calls, usec float64
	}
	var rows []row
	var total float64
	for name, v := range b {
		d := [2]float64{v[0] - a[name][0], v[1] - a[name][1]}
		if d[0] <= 0 || name == "info" {
			continue
		}
		rows = append(rows, row{name, d[0] / float64(jobs), d[1] / float64(jobs)})
		total += d[0] / float64(jobs)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].usec > rows[j].usec })
	// No sum of the times: a script call's time (fcall, evalsha) includes the time of the commands
	// its script runs, which INFO commandstats also counts under their own names.
	parts := []string{fmt.Sprintf("%.2f commands per job (a script call's time includes its script's commands):", total)}
	for _, r := range rows {
		parts = append(parts, fmt.Sprintf("%s %.3f (%.1f µs)", r.name, r.calls, r.usec))
	}
	return strings.Join(parts, " ")
}

func runBullMQ(ctx context.Context, dir, scenario string, jobs, warm int, rdb *goredis.Client) (bullmqResult, error) {
	host, port, _ := strings.Cut(redisAddr(), ":")
	r := bullmqResult{loadBefore: loadavg()}
	srv0 := redisCPU(ctx, rdb)
	cmd := exec.CommandContext(ctx, "node", "run.mjs", scenario, fmt.Sprint(jobs), fmt.Sprint(warm), host, port,
		"bench-"+uuidv7.New()[24:])
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return r, fmt.Errorf("bullmq %s: %v: %s", scenario, err, out)
	}
	var res struct {
		Jobs    int     `json:"jobs"`
		Seconds float64 `json:"seconds"`
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		return r, fmt.Errorf("bullmq %s: reading %q: %v", scenario, out, err)
	}
	r.jobsPerSec = float64(res.Jobs) / res.Seconds
	r.driverCPU = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	r.srvCPU = redisCPU(ctx, rdb) - srv0
	r.loadAt = loadavg()
	return r, nil
}

type bullmqNoop struct{}

func (bullmqNoop) Kind() string { return "bench.noop" }

func runProntoRedis(ctx context.Context, scenario string, jobs, warm int, rdb *goredis.Client) (bullmqResult, error) {
	r := bullmqResult{loadBefore: loadavg()}
	id := "mq-" + uuidv7.New()
	defer func() { _ = prontoRedis{}.drop(context.Background(), nil, id) }()
	st, err := redisstore.New(ctx, rdb, redisstore.Options{Prefix: redisPrefix(id)})
	if err != nil {
		return r, err
	}
	defer st.Close()
	ins, err := pronto.NewClient(st, nil)
	if err != nil {
		return r, err
	}
	add := func(n int) error {
		for range n {
			if _, err := ins.Insert(ctx, bullmqNoop{}, nil); err != nil {
				return err
			}
		}
		return nil
	}
	addBulk := func(n int) error {
		for i := 0; i < n; i += 50 {
			ps := make([]pronto.InsertManyParams, min(50, n-i))
			for k := range ps {
				ps[k] = pronto.InsertManyParams{Args: bullmqNoop{}}
			}
			if _, err := ins.InsertMany(ctx, ps); err != nil {
				return err
			}
		}
		return nil
	}
	completed := func() int64 {
		qs, _ := st.ListQueues(ctx)
		var n int64
		for _, q := range qs {
			n += q.Counts[store.StateCompleted]
		}
		return n
	}
	consume := func(n int, workers int) error {
		base := completed()
		ws := pronto.NewWorkers()
		pronto.AddWorker(ws, pronto.WorkFunc(func(context.Context, *pronto.Job[bullmqNoop]) error { return nil }))
		c, err := pronto.NewClient(st, &pronto.Config{Workers: ws,
			Queues: map[string]pronto.QueueConfig{pronto.DefaultQueue: {MaxWorkers: workers, Prefetch: *bullmqPrefetch}}})
		if err != nil {
			return err
		}
		// Completions are counted as BullMQ's driver counts them, from the worker's own events (a
		// completed event follows the outcome's write), not by polling Redis meanwhile; a dropped
		// event makes the count fall back to the store's.
		evs, unsubscribe := c.Subscribe(pronto.EventCompleted)
		defer unsubscribe()
		if err := c.Start(ctx); err != nil {
			return err
		}
		for done := 0; done < n; {
			select {
			case <-evs:
				done++
			case <-time.After(100 * time.Millisecond):
				if c.DroppedEvents() > 0 && completed()-base >= int64(n) {
					done = n
				}
			}
		}
		return c.Stop(ctx)
	}
	var measure func() error
	switch scenario {
	case "queue-add":
		if err := add(warm); err != nil {
			return r, err
		}
		measure = func() error { return add(jobs) }
	case "queue-add-bulk":
		if err := addBulk(warm); err != nil {
			return r, err
		}
		measure = func() error { return addBulk(jobs) }
	default:
		workers := 1
		if scenario == "worker-concurrent" {
			workers = 100
		}
		if err := addBulk(warm); err != nil {
			return r, err
		}
		if err := consume(warm, workers); err != nil {
			return r, err
		}
		if err := addBulk(jobs); err != nil {
			return r, err
		}
		measure = func() error { return consume(jobs, workers) }
	}
	stats0 := commandStats(ctx, rdb)
	stopProfile, err := startProfile(scenario)
	if err != nil {
		return r, err
	}
	srv0, self0 := redisCPU(ctx, rdb), selfCPU()
	start := time.Now()
	if err := measure(); err != nil {
		stopProfile()
		return r, err
	}
	r.jobsPerSec = float64(jobs) / time.Since(start).Seconds()
	stopProfile()
	if *bullmqProfile != "" {
		r.perJob = perJobStats(stats0, commandStats(ctx, rdb), jobs)
	}
	r.driverCPU = selfCPU() - self0
	r.srvCPU = redisCPU(ctx, rdb) - srv0
	r.loadAt = loadavg()
	return r, nil
}

// roundTripProbes is how many PINGs redisRoundTrip times.
const roundTripProbes = 2000

// redisRoundTrip returns the median time of a PING sent by one caller back to back: the floor of any
// operation that waits for Redis's answer before the next (a single add, one worker's next job).
func redisRoundTrip(ctx context.Context, rdb *goredis.Client) (time.Duration, error) {
	d := make([]time.Duration, roundTripProbes)
	for i := range d {
		t0 := time.Now()
		if err := rdb.Ping(ctx).Err(); err != nil {
			return 0, err
		}
		d[i] = time.Since(t0)
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2], nil
}

// roundTripBound reports whether scenario sc waits for one Redis round trip per job on both sides:
// one producer awaiting each single add, one worker at concurrency 1 (BullMQ fetches the next job in
// the call that finishes the last; pronto-redis claims it in one call).
// (With prefetch, pronto-redis's one worker no longer waits for a claim between jobs.)
func roundTripBound(sc string) bool { return sc == "queue-add" || sc == "worker-generic" }

// compareBullMQ runs the four scenarios, runs times each, alternating BullMQ and pronto-redis, and
// prints a table with the same-run ratio.
func compareBullMQ(ctx context.Context, jobs, warm, runs int) error {
	dir, err := bullmqDir()
	if err != nil {
		return err
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: redisAddr(), PoolSize: 32})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("no Redis at %s: %v (start one: redis-server --daemonize yes --save \"\" --appendonly no)", redisAddr(), err)
	}
	fmt.Printf("BullMQ vs pronto-redis, %d measured jobs (+%d warm-up, not counted), %d run(s), Redis %s\n", jobs, warm, runs, redisAddr())
	if *bullmqPrefetch > 0 {
		fmt.Printf("pronto-redis's consumers prefetch up to %d jobs beyond their free workers (QueueConfig.Prefetch; BullMQ's do not)\n", *bullmqPrefetch)
	}
	rtt, err := redisRoundTrip(ctx, rdb)
	if err != nil {
		return err
	}
	fmt.Printf("Redis round trip (PING, one caller, back to back, p50 of %d): %.1f µs: a scenario that waits one round trip per job runs at most %.0f jobs/s here\n",
		roundTripProbes, float64(rtt.Nanoseconds())/1e3, 1/rtt.Seconds())
	fmt.Printf("%-18s %-4s %12s %10s %10s %12s %10s %10s %7s %s\n", "scenario", "run", "bullmq/s", "node cpu", "redis cpu",
		"pronto/s", "go cpu", "redis cpu", "ratio", "load before→after (bullmq; pronto)")
	for _, sc := range bullmqScenarios {
		for run := 1; run <= runs; run++ {
			b, err := runBullMQ(ctx, dir, sc, jobs, warm, rdb)
			if err != nil {
				return err
			}
			p, err := runProntoRedis(ctx, sc, jobs, warm, rdb)
			if err != nil {
				return err
			}
			fmt.Printf("%-18s %-4d %12.0f %9.2fs %9.2fs %12.0f %9.2fs %9.2fs %6.2fx %s→%s; %s→%s\n", sc, run,
				b.jobsPerSec, b.driverCPU, b.srvCPU, p.jobsPerSec, p.driverCPU, p.srvCPU, p.jobsPerSec/b.jobsPerSec,
				b.loadBefore, b.loadAt, p.loadBefore, p.loadAt)
			if p.perJob != "" {
				fmt.Printf("    pronto-redis %s: %s\n", sc, p.perJob)
			}
			if roundTripBound(sc) && (sc != "worker-generic" || *bullmqPrefetch == 0) {
				fmt.Printf("    %s waits one round trip per job on both sides: the round trip alone caps pronto-redis at %.2fx this run's BullMQ\n",
					sc, 1/rtt.Seconds()/b.jobsPerSec)
			}
		}
	}
	return nil
}
