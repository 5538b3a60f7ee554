// Package pgcluster starts a private PostgreSQL server for a test: initdb into a temporary
// directory, pg_ctl start on a free port, and a way to stop, crash and restart it while the test
// runs. Tests that take the server down (restarts, crashes) use it instead of the shared test
// database, which other tests are using at the same moment.
//
// It needs the PostgreSQL server binaries (initdb, pg_ctl), found on PATH or under
// /usr/lib/postgresql/*/bin. When they are missing the test fails with a message that says what to
// install; it never skips. Run as root, the server runs as user postgres (PostgreSQL refuses to run
// as root).
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Cluster is a running private PostgreSQL server. Its methods are safe for concurrent use.
type Cluster struct {
	t      testing.TB
	bin    string // directory of initdb and pg_ctl
	dir    string // the temporary directory: data/ and the socket live here
	port   int
	cred   *syscall.Credential // set when run as root
	mu     sync.Mutex
	closed bool
}

// Start creates and starts a private cluster for the test, stopped and removed when the test ends.
// It fails the test when the server binaries are missing or the server does not start.
func Start(t testing.TB) *Cluster {
	t.Helper()
	bin, err := findBinaries()
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{t: t, bin: bin}
	if os.Geteuid() == 0 {
		c.cred, err = postgresUser()
		if err != nil {
			t.Fatal(err)
		}
	}
	reapOrphans(bin, c.cred)
	// Not t.TempDir: its parent directories are private to the test's user, and the server may run
	// as another user (postgres) that must reach its data directory.
	c.dir, err = os.MkdirTemp("", dirPrefix)
	if err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
	// The owner file lets a later Start stop this server if this process dies without cleaning up
	// (a test binary killed by its timeout).
	if err := os.WriteFile(filepath.Join(c.dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
	t.Cleanup(func() {
		c.Stop()
		_ = os.RemoveAll(c.dir)
	})
	if c.cred != nil {
		if err := os.Chown(c.dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			t.Fatalf("pgcluster: chown %s to postgres: %v", c.dir, err)
		}
	}
	// No fsync: the tests crash the server, never the operating system, and initdb is several times
	// faster without it.
	if out, err := c.run("initdb", "-D", c.dataDir(), "-U", "postgres", "--auth=trust", "--no-sync",
		"--encoding=UTF8", "--locale=C"); err != nil {
		t.Fatalf("pgcluster: initdb failed: %v\n%s", err, out)
	}
	// A free port can be taken by someone else between the probe and the server's bind: try again.
	for try := 0; ; try++ {
		c.port, err = freePort()
		if err != nil {
			t.Fatalf("pgcluster: %v", err)
		}
		if err = c.Up(); err == nil {
			break
		}
		if try == 2 {
			t.Fatalf("pgcluster: %v", err)
		}
	}
	return c
}

// URL is the connection URL of the cluster's database "postgres", as superuser postgres.
func (c *Cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// Port is the TCP port the server listens on (on 127.0.0.1); it stays the same across restarts.
func (c *Cluster) Port() int { return c.port }

// Restart stops the server in the given pg_ctl shutdown mode and starts it again:
// "fast" (clients disconnected, clean shutdown) or "immediate" (every server process killed
// without a checkpoint: a crash, recovered from the WAL at the next start). "smart" is accepted too.
func (c *Cluster) Restart(mode string) {
	c.t.Helper()
	if err := c.Down(mode); err != nil {
		c.t.Fatalf("pgcluster: %v", err)
	}
	if err := c.Up(); err != nil {
		c.t.Fatalf("pgcluster: %v", err)
	}
}

// Down stops the server in the given pg_ctl shutdown mode ("smart", "fast" or "immediate") and
// waits until it has stopped. Up starts it again on the same port, for a test that wants an outage
// of its own length between the two.
func (c *Cluster) Down(mode string) error {
	switch mode {
	case "smart", "fast", "immediate":
	default:
		return fmt.Errorf("shutdown mode %q: want smart, fast or immediate", mode)
	}
	if out, err := c.run("pg_ctl", "-D", c.dataDir(), "-m", mode, "-w", "-t", "60", "stop"); err != nil {
		return fmt.Errorf("pg_ctl stop -m %s: %v\n%s", mode, err, out)
	}
	return nil
}

// Up starts the server (stopped by Down) and waits until it accepts connections.
func (c *Cluster) Up() error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=60 -c fsync=off "+
		"-c shared_buffers=16MB", c.port, c.dir)
	logFile := filepath.Join(c.dir, "server.log")
	if out, err := c.run("pg_ctl", "-D", c.dataDir(), "-l", logFile, "-o", opts, "-w", "-t", "60", "start"); err != nil {
		log, _ := os.ReadFile(logFile)
		return fmt.Errorf("pg_ctl start on port %d: %v\n%s\nserver log:\n%s", c.port, err, out, tail(string(log), 2000))
	}
	// pg_ctl -w returns once the server accepts connections on its socket; make sure TCP does too.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, c.URL())
		if err == nil {
			_ = conn.Close(ctx)
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("server started but does not accept connections at %s: %v", c.URL(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop shuts the server down (immediate mode: nothing is kept afterwards). Start registers it as a
// cleanup; calling it earlier is fine, and calling it twice does nothing.
func (c *Cluster) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	if _, err := os.Stat(filepath.Join(c.dataDir(), "postmaster.pid")); err != nil {
		return // not running
	}
	_, _ = c.run("pg_ctl", "-D", c.dataDir(), "-m", "immediate", "-w", "-t", "60", "stop")
}

func (c *Cluster) dataDir() string { return filepath.Join(c.dir, "data") }

// run runs one of the server binaries, as user postgres when we are root.
func (c *Cluster) run(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(c.bin, name), args...)
	cmd.Dir = c.dir
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
		cmd.Env = append(os.Environ(), "HOME="+c.dir)
	}
	// The server pg_ctl starts must not share our stdout: the test runner waits for every writer of
	// the pipe to close it, and the server outlives this call. CombinedOutput gives pg_ctl a pipe of
	// its own; pg_ctl redirects the server to the log file.
	return cmd.CombinedOutput()
}

const (
	dirPrefix = "pgcluster-"
	ownerFile = "owner.pid"
)

// reapOrphans stops and removes the clusters of test processes that died without stopping them.
func reapOrphans(bin string, cred *syscall.Credential) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // not ours, or still being created
		}
		pid, err := strconv.Atoi(string(b))
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue // its owner is alive (or we cannot tell)
		}
		orphan := &Cluster{bin: bin, dir: dir, cred: cred}
		if _, err := os.Stat(filepath.Join(orphan.dataDir(), "postmaster.pid")); err == nil {
			_, _ = orphan.run("pg_ctl", "-D", orphan.dataDir(), "-m", "immediate", "-w", "-t", "60", "stop")
		}
		_ = os.RemoveAll(dir)
	}
}

// findBinaries returns the directory holding initdb and pg_ctl: on PATH, else the newest
// /usr/lib/postgresql/N/bin.
func findBinaries() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "pg_ctl")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, dir := range dirs {
		_, err1 := os.Stat(filepath.Join(dir, "initdb"))
		_, err2 := os.Stat(filepath.Join(dir, "pg_ctl"))
		if err1 == nil && err2 == nil {
			return dir, nil
		}
	}
	return "", errors.New("pgcluster: this test starts a PostgreSQL server of its own and needs the server " +
		"binaries initdb and pg_ctl, found neither on PATH nor in /usr/lib/postgresql/*/bin. Install them " +
		"(Debian/Ubuntu: apt-get install postgresql; Fedora: dnf install postgresql-server; " +
		"macOS: brew install postgresql) or put their directory on PATH")
}

// version is N of /usr/lib/postgresql/N/bin (0 if it is not a number).
func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// postgresUser returns the credentials of user postgres, under which the server runs when the test
// runs as root.
func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: running as root, the server must run as user postgres, "+
			"which does not exist (%v); create it (useradd --system postgres) or run the tests as another user", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("pgcluster: user postgres has uid %q gid %q: not numbers", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// freePort returns a TCP port on 127.0.0.1 that nothing listens on right now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
