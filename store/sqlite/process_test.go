package sqlite

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// Helper processes: the test binary re-executed with PRONTO_SQLITE_HELPER set runs one helper and
// exits, instead of the tests.
const (
	helperEnv = "PRONTO_SQLITE_HELPER"
	pathEnv   = "PRONTO_SQLITE_PATH"
	outEnv    = "PRONTO_SQLITE_OUT"
	countEnv  = "PRONTO_SQLITE_COUNT"
	startEnv  = "PRONTO_SQLITE_START"
)

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "insert":
		os.Exit(helperInsert())
	case "claim":
		os.Exit(helperClaim())
	case "unique":
		os.Exit(helperUnique())
	case "limited":
		os.Exit(helperLimited())
	case "reader":
		os.Exit(helperReader())
	default:
		fmt.Fprintf(os.Stderr, "unknown helper %q\n", os.Getenv(helperEnv))
		os.Exit(2)
	}
}

// helperInsert inserts jobs one per Insert call, forever, printing each id once Insert has returned
// (acknowledged it). The parent kills it.
func helperInsert() int {
	ctx := context.Background()
	s, err := Open(ctx, os.Getenv(pathEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	w := bufio.NewWriter(os.Stdout)
	for i := 0; ; i++ {
		p := &store.InsertParams{ID: uuidv7.New(), Kind: "durable", Queue: "default",
			Args: json.RawMessage(fmt.Sprintf(`[{"n":%d}]`, i)), MaxAttempts: 3, State: store.StateAvailable}
		if i%2 == 1 { // alternate single inserts and batches
			q := *p
			q.ID = uuidv7.New()
			if _, err := s.Insert(ctx, []*store.InsertParams{p, &q}); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			fmt.Fprintln(w, p.ID)
			fmt.Fprintln(w, q.ID)
		} else {
			if _, err := s.Insert(ctx, []*store.InsertParams{p}); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			fmt.Fprintln(w, p.ID)
		}
		if err := w.Flush(); err != nil {
			return 1
		}
	}
}

// helperClaim claims and completes jobs of queue "contended" in small batches until none is left,
// writing every claimed id to the out file.
func helperClaim() int {
	return runHelper(func(ctx context.Context, s *Store, w *bufio.Writer) error {
		worker := fmt.Sprintf("pid-%d", os.Getpid())
		waitForStart()
		for empty := 0; empty < 3; {
			jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "contended", Limit: 10, WorkerID: worker,
				LeaseDuration: time.Hour})
			if err != nil {
				return fmt.Errorf("claim: %w", err)
			}
			if len(jobs) == 0 {
				empty++
				time.Sleep(20 * time.Millisecond)
				continue
			}
			empty = 0
			for _, j := range jobs {
				fmt.Fprintln(w, j.ID)
			}
			if err := completeAll(ctx, s, jobs); err != nil {
				return err
			}
		}
		return nil
	})
}

// runHelper opens the store named by pathEnv, runs fn with a writer on the file named by outEnv, and
// returns the helper's exit code: 0 when fn succeeded and its output was written, else 1 with the
// error on stderr.
func runHelper(fn func(ctx context.Context, s *Store, w *bufio.Writer) error) int {
	ctx := context.Background()
	err := func() error {
		s, err := Open(ctx, os.Getenv(pathEnv))
		if err != nil {
			return err
		}
		defer s.Close()
		f, err := os.Create(os.Getenv(outEnv))
		if err != nil {
			return err
		}
		defer f.Close()
		w := bufio.NewWriter(f)
		if err := fn(ctx, s, w); err != nil {
			return err
		}
		return w.Flush()
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// completeAll completes the claimed jobs in one Finish and checks that every completion applied.
func completeAll(ctx context.Context, s *Store, jobs []*store.Job) error {
	cs := make([]store.Completion, len(jobs))
	for i, j := range jobs {
		cs[i] = store.Completion{ID: j.ID, Attempt: j.Attempt, State: store.StateCompleted}
	}
	res, err := s.Finish(ctx, cs)
	if err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	for _, r := range res {
		if !r.Applied {
			return fmt.Errorf("completion of %s not applied", r.ID)
		}
	}
	return nil
}

// helperCmd returns the test binary re-executed as the named helper.
func helperCmd(t *testing.T, name string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{helperEnv + "=" + name}, env...)...)
	cmd.Stderr = os.Stderr
	return cmd
}

// TestDurableAcrossSIGKILL: every job Insert acknowledged is in the file after the process that
// inserted it is killed with SIGKILL, mid-stream.
func TestDurableAcrossSIGKILL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "durable.db")
	s0 := openAt(t, path) // creates and migrates the file
	require.NoError(t, s0.Close())

	const n = 500
	cmd := helperCmd(t, "insert", pathEnv+"="+path)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var ids []string
	sc := bufio.NewScanner(out)
	for len(ids) < n && sc.Scan() {
		ids = append(ids, strings.TrimSpace(sc.Text()))
	}
	// The helper is still inserting: kill it in the middle of its work.
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	for sc.Scan() { // ids acknowledged before the kill landed count too
		ids = append(ids, strings.TrimSpace(sc.Text()))
	}
	err = cmd.Wait()
	require.Error(t, err, "the helper must have been killed")
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "helper ended by %v, not SIGKILL", err)
	require.GreaterOrEqual(t, len(ids), n)

	s, err := Open(ctx, path)
	require.NoError(t, err)
	defer s.Close()
	for _, id := range ids {
		j, err := s.GetJob(ctx, id)
		require.NoError(t, err, "acknowledged job %s lost", id)
		require.Equal(t, store.StateAvailable, j.State)
	}
}

// TestTwoProcessesClaimExclusively: two processes claiming from one file never claim a job twice, and
// between them claim every job.
func TestTwoProcessesClaimExclusively(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "shared.db")
	s := openAt(t, path)
	const total = 2000
	var all []string
	for b := 0; b < total; b += 500 {
		var ps []*store.InsertParams
		for range 500 {
			p := &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "contended", Args: json.RawMessage(`[]`),
				MaxAttempts: 1, State: store.StateAvailable}
			ps = append(ps, p)
			all = append(all, p.ID)
		}
		_, err := s.Insert(ctx, ps)
		require.NoError(t, err)
	}

	outs := runHelpers(t, "claim", path, 2)

	seen := map[string]int{}
	perProc := make([]int, len(outs))
	for i, out := range outs {
		b, err := os.ReadFile(out)
		require.NoError(t, err)
		for _, id := range strings.Fields(string(b)) {
			seen[id]++
			perProc[i]++
		}
	}
	for id, n := range seen {
		require.Equal(t, 1, n, "job %s claimed %d times", id, n)
	}
	require.Len(t, seen, total, "every job claimed once")
	for _, id := range all {
		require.Contains(t, seen, id)
	}
	t.Logf("claims per process: %v", perProc)

	// The database agrees: every job completed on its first attempt.
	qs, err := s.ListQueues(ctx)
	require.NoError(t, err)
	require.Len(t, qs, 1)
	require.Equal(t, int64(total), qs[0].Counts[store.StateCompleted])
	j, err := s.GetJob(ctx, all[0])
	require.NoError(t, err)
	require.Equal(t, 1, j.Attempt)
}

// waitForStart waits until the file named by startEnv exists, so that helper processes begin their
// contended work together.
func waitForStart() {
	for {
		if _, err := os.Stat(os.Getenv(startEnv)); err == nil {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// uniqueSlot is how long the unique helpers contend for one key: every insert made within one slot
// of the clock uses the slot's key, so both processes insert each key many times at the same moments.
const uniqueSlot = 5 * time.Millisecond

// uniqueKeyAt returns the key of the slot holding t: even slots use ConflictReject, odd ones
// ConflictIgnore.
func uniqueKeyAt(t time.Time) (string, store.OnConflict) {
	slot := t.UnixNano() / int64(uniqueSlot)
	if slot%2 == 0 {
		return fmt.Sprintf("slot-%d", slot), store.ConflictReject
	}
	return fmt.Sprintf("slot-%d", slot), store.ConflictIgnore
}

// helperUnique inserts unique jobs for PRONTO_SQLITE_COUNT milliseconds, each with the key of the
// current slot (see uniqueSlot), and writes "key id" for every insert it won (its own job stored) to
// the out file.
func helperUnique() int {
	return runHelper(func(ctx context.Context, s *Store, w *bufio.Writer) error {
		ms, err := strconv.Atoi(os.Getenv(countEnv))
		if err != nil {
			return err
		}
		waitForStart()
		for end := time.Now().Add(time.Duration(ms) * time.Millisecond); time.Now().Before(end); {
			key, policy := uniqueKeyAt(time.Now())
			p := &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "unique", Args: json.RawMessage(`[]`),
				MaxAttempts: 1, State: store.StateAvailable, UniqueKey: key, OnConflict: policy}
			jobs, err := s.Insert(ctx, []*store.InsertParams{p})
			switch {
			case errors.Is(err, store.ErrUniqueConflict) && policy == store.ConflictReject:
				continue
			case err != nil:
				return fmt.Errorf("insert: %w", err)
			case jobs[0].Duplicate:
				continue
			case jobs[0].ID != p.ID:
				return fmt.Errorf("insert returned another job without Duplicate: %s", jobs[0].ID)
			}
			fmt.Fprintln(w, key, p.ID)
		}
		return nil
	})
}

// Settings of the limited-claim helpers.
const (
	limitedKey       = "two-process-key"
	limitedMaxActive = 3
)

// helperLimited claims and completes the jobs of queue "limited" (all under limitedKey) until none is
// left. After each claim, while it holds the jobs, it counts the key's active jobs in a fresh read: a
// committed state with more than limitedMaxActive would show there. It writes "max N" (the largest
// count it saw) and then every claimed id to the out file.
func helperLimited() int {
	return runHelper(func(ctx context.Context, s *Store, w *bufio.Writer) error {
		worker := fmt.Sprintf("pid-%d", os.Getpid())
		rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 1))
		var claimed []string
		seen := int64(0)
		waitForStart()
		for empty := 0; empty < 50; {
			jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "limited", Limit: 1 + rng.IntN(5), WorkerID: worker,
				LeaseDuration: time.Hour})
			if err != nil {
				return fmt.Errorf("claim: %w", err)
			}
			if len(jobs) == 0 {
				empty++
				time.Sleep(2 * time.Millisecond)
				continue
			}
			empty = 0
			info, err := s.GetRateLimit(ctx, limitedKey)
			if err != nil {
				return fmt.Errorf("rate limit: %w", err)
			}
			seen = max(seen, info.Active)
			time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
			for _, j := range jobs {
				claimed = append(claimed, j.ID)
			}
			if err := completeAll(ctx, s, jobs); err != nil {
				return err
			}
		}
		fmt.Fprintln(w, "max", seen)
		for _, id := range claimed {
			fmt.Fprintln(w, id)
		}
		return nil
	})
}

// runHelpers starts procs helper processes of the given kind on path, lets them begin together, and
// waits for them; it returns their out files.
func runHelpers(t *testing.T, name, path string, procs int, env ...string) []string {
	t.Helper()
	dir := filepath.Dir(path)
	start := filepath.Join(dir, "start-"+name)
	outs := make([]string, procs)
	cmds := make([]*exec.Cmd, procs)
	for i := range procs {
		outs[i] = filepath.Join(dir, name+"-out-"+strconv.Itoa(i))
		cmds[i] = helperCmd(t, name, append([]string{pathEnv + "=" + path, outEnv + "=" + outs[i],
			startEnv + "=" + start}, env...)...)
		require.NoError(t, cmds[i].Start())
	}
	time.Sleep(100 * time.Millisecond) // let both open the file before the race starts
	require.NoError(t, os.WriteFile(start, nil, 0o600))
	for i, cmd := range cmds {
		require.NoError(t, cmd.Wait(), "%s helper %d", name, i)
	}
	return outs
}

// TestTwoProcessesUniqueInserts: two processes inserting jobs with the same unique keys at the same
// moments (see uniqueSlot) never both store a job for one key, under ConflictReject and
// ConflictIgnore alike.
func TestTwoProcessesUniqueInserts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "unique.db")
	s := openAt(t, path)
	outs := runHelpers(t, "unique", path, 2, countEnv+"=1000")

	winners := map[string]string{} // key -> id
	perProc := make([]int, len(outs))
	for i, out := range outs {
		b, err := os.ReadFile(out)
		require.NoError(t, err)
		for _, line := range strings.Fields(strings.ReplaceAll(string(b), " ", "=")) {
			key, id, ok := strings.Cut(line, "=")
			require.True(t, ok, "line %q", line)
			prev, dup := winners[key]
			require.False(t, dup, "key %s won twice: jobs %s and %s", key, prev, id)
			winners[key] = id
			perProc[i]++
		}
	}
	t.Logf("keys won per process: %v", perProc)
	require.NotEmpty(t, winners)

	jobs, next, err := s.ListJobs(ctx, store.ListParams{Queues: []string{"unique"}, Limit: 2 * len(winners)})
	require.NoError(t, err)
	require.Empty(t, next)
	require.Len(t, jobs, len(winners), "one job stored per key, the one its inserter won with")
	for _, j := range jobs {
		require.Equal(t, winners[j.UniqueKey], j.ID, "the stored job of %s is the one its inserter won with", j.UniqueKey)
	}
}

// TestTwoProcessesMaxActive: two processes claiming jobs of one limited key from one file never have
// more than MaxActive of them active at once, and between them run every job once.
func TestTwoProcessesMaxActive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "limited.db")
	s := openAt(t, path)
	require.NoError(t, s.SetRateLimit(ctx, limitedKey, store.RateLimit{MaxActive: limitedMaxActive}))
	const total = 150
	ps := params("limited", total)
	for _, p := range ps {
		p.RateKey = limitedKey
	}
	_, err := s.Insert(ctx, ps)
	require.NoError(t, err)

	// This process watches too, from its own connections, while the helpers run.
	stop := make(chan struct{})
	watched := make(chan int64, 1)
	go func() {
		peak := int64(0)
		defer func() { watched <- peak }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			info, err := s.GetRateLimit(ctx, limitedKey)
			if err != nil {
				return
			}
			peak = max(peak, info.Active)
			time.Sleep(200 * time.Microsecond)
		}
	}()
	outs := runHelpers(t, "limited", path, 2)
	close(stop)
	require.LessOrEqual(t, <-watched, int64(limitedMaxActive), "the watcher never saw more than MaxActive active")

	seen := map[string]int{}
	for i, out := range outs {
		b, err := os.ReadFile(out)
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		require.NotEmpty(t, lines)
		var peak int64
		_, err = fmt.Sscanf(lines[0], "max %d", &peak)
		require.NoError(t, err)
		require.LessOrEqual(t, peak, int64(limitedMaxActive), "helper %d saw more than MaxActive active", i)
		require.Positive(t, peak, "helper %d claimed", i)
		for _, id := range lines[1:] {
			seen[id]++
		}
	}
	require.Len(t, seen, total, "every job claimed")
	for id, n := range seen {
		require.Equal(t, 1, n, "job %s claimed %d times", id, n)
	}
	qs, err := s.ListQueues(ctx)
	require.NoError(t, err)
	require.Len(t, qs, 1)
	require.Equal(t, int64(total), qs[0].Counts[store.StateCompleted])
}
