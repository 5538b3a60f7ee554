package pgcluster_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/pgcluster"
)

// TestRestartKeepsCommittedData: a private cluster starts, serves, and keeps what was committed
// across a fast restart and a crash (immediate), on the same URL.
func TestRestartKeepsCommittedData(t *testing.T) {
	t.Parallel()
	c := pgcluster.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	exec := func(sql string, args ...any) {
		t.Helper()
		conn, err := pgx.Connect(ctx, c.URL())
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	count := func() int {
		t.Helper()
		conn, err := pgx.Connect(ctx, c.URL())
		require.NoError(t, err)
		defer conn.Close(ctx)
		var n int
		require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM kept").Scan(&n))
		return n
	}
	exec("CREATE TABLE kept (n int)")
	exec("INSERT INTO kept VALUES (1)")
	c.Restart("fast")
	require.Equal(t, 1, count())
	exec("INSERT INTO kept VALUES (2)")
	c.Restart("immediate")
	require.Equal(t, 2, count())

	require.NoError(t, c.Down("immediate"))
	_, err := pgx.Connect(ctx, c.URL())
	require.Error(t, err, "the server is down")
	require.NoError(t, c.Up())
	require.Equal(t, 2, count())
	require.Error(t, c.Down("sideways"), "an unknown mode is refused")
	c.Stop()
	c.Stop()
}

// With PGCLUSTER_ORPHAN set, the test binary starts a cluster, prints its URL and waits to be
// killed: an owner that dies without stopping its server.
func TestMain(m *testing.M) {
	if os.Getenv("PGCLUSTER_ORPHAN") != "" {
		c := pgcluster.Start(&orphanTB{})
		fmt.Println(c.URL())
		select {}
	}
	os.Exit(m.Run())
}

// orphanTB lets the helper process call Start outside a test.
type orphanTB struct{ testing.TB }

func (*orphanTB) Helper()        {}
func (*orphanTB) Cleanup(func()) {}
func (*orphanTB) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, args...)
	os.Exit(1)
}
func (*orphanTB) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

// TestOrphanReaped: the server of a test process that was killed (so never stopped it) is stopped
// and removed by the next Start.
func TestOrphanReaped(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PGCLUSTER_ORPHAN=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	require.True(t, sc.Scan(), "the helper starts a cluster")
	url := sc.Text()
	var dir string
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "pgcluster-*"))
	for _, d := range dirs {
		if b, _ := os.ReadFile(filepath.Join(d, "owner.pid")); string(b) == strconv.Itoa(cmd.Process.Pid) {
			dir = d
		}
	}
	require.NotEmpty(t, dir, "the helper's cluster directory records its owner")
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err, "the orphan server outlives its owner")
	require.NoError(t, conn.Close(ctx))

	pgcluster.Start(t) // reaps it
	_, err = os.Stat(dir)
	require.True(t, os.IsNotExist(err), "the orphan's directory is removed")
	_, err = pgx.Connect(ctx, url)
	require.Error(t, err, "the orphan server is stopped")
}
