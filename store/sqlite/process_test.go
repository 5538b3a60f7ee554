package sqlite

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
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
)

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "insert":
		os.Exit(helperInsert())
	case "claim":
		os.Exit(helperClaim())
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
	ctx := context.Background()
	s, err := Open(ctx, os.Getenv(pathEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	f, err := os.Create(os.Getenv(outEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	worker := fmt.Sprintf("pid-%d", os.Getpid())
	empty := 0
	for empty < 3 {
		jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "contended", Limit: 10, WorkerID: worker,
			LeaseDuration: time.Hour})
		if err != nil {
			fmt.Fprintln(os.Stderr, "claim:", err)
			return 1
		}
		if len(jobs) == 0 {
			empty++
			time.Sleep(20 * time.Millisecond)
			continue
		}
		empty = 0
		cs := make([]store.Completion, len(jobs))
		for i, j := range jobs {
			fmt.Fprintln(w, j.ID)
			cs[i] = store.Completion{ID: j.ID, Attempt: j.Attempt, State: store.StateCompleted}
		}
		res, err := s.Finish(ctx, cs)
		if err != nil {
			fmt.Fprintln(os.Stderr, "finish:", err)
			return 1
		}
		for _, r := range res {
			if !r.Applied {
				fmt.Fprintln(os.Stderr, "completion not applied:", r.ID)
				return 1
			}
		}
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
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
	dir := t.TempDir()
	path := filepath.Join(dir, "shared.db")
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

	const procs = 2
	cmds := make([]*exec.Cmd, procs)
	outs := make([]string, procs)
	for i := range procs {
		outs[i] = filepath.Join(dir, "claimed-"+strconv.Itoa(i))
		cmds[i] = helperCmd(t, "claim", pathEnv+"="+path, outEnv+"="+outs[i])
		require.NoError(t, cmds[i].Start())
	}
	for i, cmd := range cmds {
		require.NoError(t, cmd.Wait(), "claim helper %d", i)
	}

	seen := map[string]int{}
	perProc := make([]int, procs)
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
