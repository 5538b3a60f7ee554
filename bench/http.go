//go:build !benchworker

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The HTTP scenario: the OJS benchmark's three operations (enqueue, fetch, and an enqueue → fetch →
// ack round trip) by 100 concurrent HTTP clients against a real `pronto serve` process (built from
// this checkout) on every store, as OJS measures its backends (benchmark and server in separate
// processes over loopback HTTP). Each run starts a fresh server on a fresh database; per operation
// it runs a warm-up, then counts the operations that complete within the measured window. The
// report puts the medians beside the table OJS publishes for its own backends.
//
//	cd bench && go run . --http [--http-stores memory,sqlite,postgres,redis --http-runs 3 --http-seconds 5]

var (
	httpMode    = flag.Bool("http", false, "run the HTTP scenario (OJS's enqueue, fetch and round trip, 100 clients, against `pronto serve` on each store) instead")
	httpStores  = flag.String("http-stores", "memory,sqlite,postgres,redis", "comma-separated stores for --http; a store with the suffix -remove (postgres-remove) runs `pronto serve --remove-completed`")
	httpClients = flag.Int("http-clients", 100, "concurrent HTTP clients for --http")
	httpSeconds = flag.Float64("http-seconds", 5, "measured window of each --http operation, in seconds (after a 1 s warm-up)")
	httpRuns    = flag.Int("http-runs", 3, "runs per store for --http (each on a fresh server and database)")
	httpOut     = flag.String("http-out", "", "directory for the --http report (http.md, http.json); default: print only")
	prontoBin   = flag.String("pronto-bin", "", "a built pronto binary for --http (default: built from this checkout into a temporary folder)")
	httpProfile = flag.String("http-profile", "", "directory for CPU profiles of `pronto serve` (started with --pprof) and of the driver (driver-*.pprof), one per store, run and operation, taken over the measured window")
)

// httpOps are the measured operations, in the order they run (fetch works the enqueue phase's jobs).
var httpOps = []string{"enqueue", "fetch", "roundtrip"}

// ojsPublished is OJS's own table (v0.1.0 reference results, GitHub Actions 2-core runners, ops/s):
// Lite is its in-process backend, the counterpart of pronto's memory store.
var ojsPublished = map[string][3]float64{
	"Lite (in-process)": {40233, 30947, 12093},
	"Redis":             {15741, 12701, 4779},
	"PostgreSQL":        {8410, 6716, 2635},
}

// httpOpResult is one operation of one run.
type httpOpResult struct {
	Store      string  `json:"store"`
	Run        int     `json:"run"`
	Op         string  `json:"op"`
	Ops        int64   `json:"ops"`
	Seconds    float64 `json:"seconds"`
	OpsPerSec  float64 `json:"ops_per_s"`
	Errors     int64   `json:"errors"`
	ServerCPU  float64 `json:"server_cpu_s"`
	DriverCPU  float64 `json:"driver_cpu_s"`
	LoadBefore string  `json:"loadavg_before"`
	LoadAfter  string  `json:"loadavg_after"`
	Note       string  `json:"note,omitempty"`
}

// buildPronto builds cmd/pronto of the checkout the bench belongs to.
func buildPronto(tmp string) (string, error) {
	if *prontoBin != "" {
		return *prontoBin, nil
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/pronto-jobs/pronto").Output()
	if err != nil {
		return "", fmt.Errorf("finding the pronto module: %v", err)
	}
	bin := filepath.Join(tmp, "pronto")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/pronto")
	cmd.Dir = strings.TrimSpace(string(out))
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/pronto: %v\n%s", err, b)
	}
	return bin, nil
}

// httpDB is one store's database for one run: the serve arguments and how to remove it.
type httpDB struct {
	args []string
	drop func()
}

func httpDatabase(ctx context.Context, storeName, dbURL, tmp string, run int) (httpDB, error) {
	if base, ok := strings.CutSuffix(storeName, "-remove"); ok {
		// The store with `pronto serve --remove-completed`: acknowledged jobs are deleted.
		db, err := httpDatabase(ctx, base, dbURL, tmp, run)
		db.args = append(db.args, "--remove-completed")
		return db, err
	}
	id := fmt.Sprintf("bench_http_%s_%d_%d", storeName, run, time.Now().UnixNano()%1_000_000)
	switch storeName {
	case "memory":
		return httpDB{args: []string{"--database-url", "memory:"}, drop: func() {}}, nil
	case "sqlite":
		path := filepath.Join(tmp, id+".db")
		return httpDB{args: []string{"--database-url", "sqlite:" + path}, drop: func() {
			for _, s := range []string{"", "-wal", "-shm"} {
				_ = os.Remove(path + s)
			}
		}}, nil
	case "postgres":
		e := &env{dbURL: dbURL}
		return httpDB{args: []string{"--database-url", dbURL, "--schema", id}, drop: func() {
			_ = dropSchema(context.Background(), e, id)
		}}, nil
	case "redis":
		return httpDB{args: []string{"--database-url", "redis://" + redisAddr() + "/0?key_prefix=" + redisPrefix(id)}, drop: func() {
			_ = prontoRedis{}.drop(context.Background(), nil, id)
		}}, nil
	}
	return httpDB{}, fmt.Errorf("unknown store %q for --http (have memory, sqlite, postgres, redis, each also with -remove)", storeName)
}

// httpServer is a running `pronto serve`.
type httpServer struct {
	cmd  *exec.Cmd
	base string
}

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

func startServe(ctx context.Context, bin string, db httpDB) (*httpServer, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{"serve", "--addr", addr}, db.args...)
	if *httpProfile != "" {
		args = append(args, "--pprof")
	}
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &httpServer{cmd: cmd, base: "http://" + addr}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(s.base + "/ojs/v1/health")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.stop()
			return nil, fmt.Errorf("pronto serve %s did not become healthy: %v %s", strings.Join(args, " "), err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// profileSelf starts a CPU profile of this process (the HTTP driver) into file; stop ends it.
func profileSelf(file string) (stop func(), err error) {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	return profileInto(f)
}

// profile writes a CPU profile of the server taken over the next d (whole seconds, at least one) to
// file.
func (s *httpServer) profile(ctx context.Context, d time.Duration, file string) error {
	secs := max(int(d.Seconds()), 1)
	req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", s.base, secs), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /debug/pprof/profile: %s", resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// cpu returns the server process's CPU seconds so far (user + system, from /proc).
func (s *httpServer) cpu() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which is in parentheses): state is field 3; utime 14, stime 15.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ is 100 on Linux
}

func (s *httpServer) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

// httpDriver sends the requests.
type httpDriver struct {
	c    *http.Client
	base string
}

func newHTTPDriver(base string, clients int) *httpDriver {
	tr := &http.Transport{MaxIdleConns: clients * 2, MaxIdleConnsPerHost: clients * 2, IdleConnTimeout: time.Minute}
	return &httpDriver{c: &http.Client{Transport: tr, Timeout: 30 * time.Second}, base: base}
}

func (d *httpDriver) post(ctx context.Context, path string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		return nil, fmt.Errorf("%s: %d %s", path, resp.StatusCode, out)
	}
	return out, nil
}

func httpJob(queue string, seq int64) []byte {
	return []byte(`{"type":"bench.http","args":[` + strconv.FormatInt(seq, 10) + `],"options":{"queue":"` + queue + `"}}`)
}

type fetchedJob struct {
	ID         string `json:"id"`
	ClaimToken string `json:"claim_token"`
}

// fetchOne fetches at most one job of queue; nil when the queue had none.
func (d *httpDriver) fetchOne(ctx context.Context, queue, worker string) (*fetchedJob, error) {
	b, err := d.post(ctx, "/ojs/v1/workers/fetch", []byte(`{"queues":["`+queue+`"],"worker_id":"`+worker+`"}`))
	if err != nil {
		return nil, err
	}
	var out struct {
		Jobs []fetchedJob `json:"jobs"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("fetch answer %q: %v", b, err)
	}
	if len(out.Jobs) == 0 {
		return nil, nil
	}
	return &out.Jobs[0], nil
}

func (d *httpDriver) ack(ctx context.Context, j *fetchedJob) error {
	body, _ := json.Marshal(map[string]any{"job_id": j.ID, "claim_token": j.ClaimToken, "result": map[string]bool{"ok": true}})
	_, err := d.post(ctx, "/ojs/v1/workers/ack", body)
	return err
}

// httpMinFetchRate is the fetch rate, in jobs/s, whose warm-up and window the fetch backlog covers.
const httpMinFetchRate = 20000

// fill enqueues n jobs into queue in batches of 500, from 8 clients at once.
func (d *httpDriver) fill(ctx context.Context, queue string, n int64) error {
	if n <= 0 {
		return nil
	}
	var left atomic.Int64
	left.Store(n)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := min(left.Add(-500)+500, 500)
				if k <= 0 {
					return
				}
				var b bytes.Buffer
				b.WriteString(`{"jobs":[`)
				for i := range k {
					if i > 0 {
						b.WriteByte(',')
					}
					b.Write(httpJob(queue, i))
				}
				b.WriteString(`]}`)
				if _, err := d.post(ctx, "/ojs/v1/jobs/batch", b.Bytes()); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// errDrained ends a fetch client: the backlog is worked off.
var errDrained = errors.New("queue drained")

// measure runs op on n clients for warm + window and counts the operations completed inside the
// window. An op returning errDrained ends the window early (at that moment) for every client.
func measure(n int, warm, window time.Duration, op func(ctx context.Context, client int, seq int64) error) (ops, errs int64, secs float64, note string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var counting atomic.Bool
	var counted, failed, seq atomic.Int64
	var drainedAt atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for c := 0; c < n; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				err := op(ctx, c, seq.Add(1))
				switch {
				case errors.Is(err, errDrained):
					drainedAt.CompareAndSwap(0, time.Now().UnixNano())
					counting.Store(false)
					return
				case err != nil:
					if ctx.Err() == nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
						time.Sleep(10 * time.Millisecond)
					}
				case counting.Load():
					counted.Add(1)
				}
			}
		}()
	}
	time.Sleep(warm)
	t0 := time.Now()
	if drainedAt.Load() == 0 {
		counting.Store(true)
	}
	end := t0.Add(window)
	for time.Now().Before(end) && drainedAt.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	counting.Store(false)
	t1 := time.Now()
	if d := drainedAt.Load(); d != 0 {
		t1 = time.Unix(0, d)
		note = fmt.Sprintf("backlog worked off after %.2f s of the window", t1.Sub(t0).Seconds())
	}
	ops = counted.Load()
	cancel()
	wg.Wait()
	if v := firstErr.Load(); v != nil {
		note = strings.TrimSpace(note + " first error: " + v.(string))
	}
	return ops, failed.Load(), t1.Sub(t0).Seconds(), note
}

// runHTTPStore runs the three operations once against a fresh server on a fresh database.
func runHTTPStore(ctx context.Context, bin, storeName, dbURL, tmp string, run, clients int, window time.Duration) ([]httpOpResult, error) {
	db, err := httpDatabase(ctx, storeName, dbURL, tmp, run)
	if err != nil {
		return nil, err
	}
	defer db.drop()
	srv, err := startServe(ctx, bin, db)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	d := newHTTPDriver(srv.base, clients)
	defer d.c.CloseIdleConnections()
	const warm = time.Second
	var out []httpOpResult
	var enqueued atomic.Int64
	ops := map[string]func(ctx context.Context, c int, seq int64) error{
		// Single enqueues into queue "enq", which the fetch operation then works off.
		"enqueue": func(ctx context.Context, _ int, seq int64) error {
			_, err := d.post(ctx, "/ojs/v1/jobs", httpJob("enq", seq))
			if err == nil {
				enqueued.Add(1)
			}
			return err
		},
		// Single fetches from the enqueue operation's backlog (not acked: a fetch is measured alone).
		"fetch": func(ctx context.Context, c int, _ int64) error {
			j, err := d.fetchOne(ctx, "enq", "w"+strconv.Itoa(c))
			if err == nil && j == nil {
				return errDrained
			}
			return err
		},
		// One job's whole life: enqueue, fetch, ack (the job fetched may be another client's).
		"roundtrip": func(ctx context.Context, c int, seq int64) error {
			if _, err := d.post(ctx, "/ojs/v1/jobs", httpJob("rt", seq)); err != nil {
				return err
			}
			for {
				j, err := d.fetchOne(ctx, "rt", "w"+strconv.Itoa(c))
				if err != nil {
					return err
				}
				if j != nil {
					return d.ack(ctx, j)
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
		},
	}
	for _, name := range httpOps {
		if name == "fetch" {
			// The fetch works the enqueue operation's jobs; where that left fewer than a fast fetch
			// could take in the warm-up and window, batches (off the clock) fill the queue up.
			want := int64(httpMinFetchRate * (warm + window).Seconds())
			if err := d.fill(ctx, "enq", want-enqueued.Load()); err != nil {
				return out, fmt.Errorf("filling the fetch backlog: %w", err)
			}
		}
		r := httpOpResult{Store: storeName, Run: run, Op: name, LoadBefore: loadAvg()}
		var profiled chan error
		if *httpProfile != "" {
			profiled = make(chan error, 1)
			file := filepath.Join(*httpProfile, fmt.Sprintf("%s-run%d-%s.pprof", storeName, run, name))
			driverFile := filepath.Join(*httpProfile, fmt.Sprintf("driver-%s-run%d-%s.pprof", storeName, run, name))
			go func() {
				time.Sleep(warm)
				stop, err := profileSelf(driverFile)
				if err != nil {
					profiled <- err
					return
				}
				err = srv.profile(ctx, window, file)
				stop()
				profiled <- err
			}()
		}
		s0, d0 := srv.cpu(), selfCPU()
		r.Ops, r.Errors, r.Seconds, r.Note = measure(clients, warm, window, ops[name])
		if profiled != nil {
			if err := <-profiled; err != nil {
				return out, fmt.Errorf("profiling pronto serve: %w", err)
			}
		}
		r.ServerCPU, r.DriverCPU = srv.cpu()-s0, selfCPU()-d0
		r.LoadAfter = loadAvg()
		if r.Seconds > 0 {
			r.OpsPerSec = float64(r.Ops) / r.Seconds
		}
		fmt.Printf("http %-8s run %d %-9s %8.0f ops/s  (%d ops in %.2f s, %d errors; server CPU %.2f s, driver CPU %.2f s; load %s → %s) %s\n",
			storeName, run, name, r.OpsPerSec, r.Ops, r.Seconds, r.Errors, r.ServerCPU, r.DriverCPU, r.LoadBefore, r.LoadAfter, r.Note)
		out = append(out, r)
	}
	return out, nil
}

// runHTTP is the --http mode: every store, --http-runs times, alternating stores within a run.
func runHTTP(ctx context.Context, dbURL string) error {
	tmp, err := os.MkdirTemp("", "pronto-bench-http-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin, err := buildPronto(tmp)
	if err != nil {
		return err
	}
	stores := splitList(*httpStores, nil)
	window := time.Duration(*httpSeconds * float64(time.Second))
	began := time.Now()
	var all []httpOpResult
	for run := 1; run <= *httpRuns; run++ {
		for k := range stores {
			st := stores[(k+run-1)%len(stores)] // rotate the order each run
			rs, err := runHTTPStore(ctx, bin, st, dbURL, tmp, run, *httpClients, window)
			if err != nil {
				return fmt.Errorf("%s run %d: %w", st, run, err)
			}
			all = append(all, rs...)
		}
	}
	md := httpReport(all, stores, *httpClients, window, time.Since(began))
	fmt.Print("\n" + md)
	if *httpOut != "" {
		if err := os.MkdirAll(*httpOut, 0o755); err != nil {
			return err
		}
		b, _ := json.MarshalIndent(all, "", "  ")
		if err := os.WriteFile(filepath.Join(*httpOut, "http.json"), b, 0o644); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(*httpOut, "http.md"), []byte(md), 0o644)
	}
	return nil
}

var httpStoreTitle = map[string]string{"memory": "pronto, memory", "sqlite": "pronto, SQLite", "postgres": "pronto, PostgreSQL", "redis": "pronto, Redis"}

// httpReport is the Markdown table: per store and operation the median ops/s with the runs' range,
// the server's CPU per 1,000 operations, and the host load; then OJS's published table.
func httpReport(all []httpOpResult, stores []string, clients int, window time.Duration, took time.Duration) string {
	var b strings.Builder
	runs := 0
	for _, r := range all {
		runs = max(runs, r.Run)
	}
	fmt.Fprintf(&b, "HTTP scenario: %d concurrent clients against `pronto serve` (a separate process, loopback HTTP, keep-alive), "+
		"1 s warm-up then a %s window per operation, %d run(s) per store on a fresh server and database, %s in all. "+
		"Median ops/s (min-max of the runs); server CPU is the `pronto serve` process's (not the database's) per 1,000 operations.\n\n",
		clients, window, runs, took.Round(time.Second))
	b.WriteString("| store | enqueue ops/s | fetch ops/s | round trip ops/s | serve CPU ms per 1k ops (enq / fetch / rt) | load (1 min) |\n|---|---|---|---|---|---|\n")
	for _, st := range stores {
		title := httpStoreTitle[st]
		if base, ok := strings.CutSuffix(st, "-remove"); ok && httpStoreTitle[base] != "" {
			title = httpStoreTitle[base] + ", serve --remove-completed"
		}
		if title == "" {
			title = st
		}
		var cells, cpus []string
		var loads []float64
		for _, op := range httpOps {
			var xs, cpu []float64
			for _, r := range all {
				if r.Store == st && r.Op == op {
					xs = append(xs, r.OpsPerSec)
					if r.Ops > 0 {
						cpu = append(cpu, r.ServerCPU*1e6/float64(r.Ops))
					}
					for _, l := range []string{r.LoadBefore, r.LoadAfter} {
						if f := strings.Fields(l); len(f) > 0 {
							v, _ := strconv.ParseFloat(f[0], 64)
							loads = append(loads, v)
						}
					}
				}
			}
			sort.Float64s(xs)
			if len(xs) == 0 {
				cells = append(cells, "-")
				cpus = append(cpus, "-")
				continue
			}
			cells = append(cells, fmt.Sprintf("**%s** (%s-%s)", thousands(median(xs)), thousands(xs[0]), thousands(xs[len(xs)-1])))
			cpus = append(cpus, fmt.Sprintf("%.0f", median(cpu)))
		}
		sort.Float64s(loads)
		load := "-"
		if len(loads) > 0 {
			load = fmt.Sprintf("%.1f-%.1f", loads[0], loads[len(loads)-1])
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", title, cells[0], cells[1], cells[2], strings.Join(cpus, " / "), load)
	}
	for _, name := range []string{"Lite (in-process)", "Redis", "PostgreSQL"} {
		v := ojsPublished[name]
		fmt.Fprintf(&b, "| OJS v0.1.0 published, %s | %s | %s | %s | | (2-core CI runners) |\n", name, thousands(v[0]), thousands(v[1]), thousands(v[2]))
	}
	b.WriteString("\nOJS's figures are its own published ones (Go benchmarks over loopback HTTP on GitHub Actions 2-core runners), not measured here: compare the shape, not the digits.\n")
	return b.String()
}

// thousands formats a rate with a thousands separator.
func thousands(f float64) string {
	s := strconv.FormatInt(int64(f+0.5), 10)
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}
