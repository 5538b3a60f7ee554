// Package pgbouncertest starts a real PgBouncer in transaction-pooling mode in front of the test
// database, for tests that prove pronto works behind one. It never skips: without the pgbouncer
// binary the test fails with the command that installs it.
package pgbouncertest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pronto-jobs/pronto/internal/testdb"
)

// PoolSize is the number of server connections PgBouncer opens to PostgreSQL, whatever the number
// of clients: the connection budget of a test that starts one.
const PoolSize = 4

// Bouncer is a running PgBouncer.
type Bouncer struct {
	// URL reaches the test database through PgBouncer, with pgx's cache_describe query mode (no
	// named prepared statements, see docs/pgbouncer.md).
	URL string
	// DirectURL reaches the test database directly, for the listener.
	DirectURL string
	// Log is PgBouncer's log file.
	Log string
}

// binary finds pgbouncer: on PATH, or in /usr/sbin where Debian installs it (not on every user's PATH).
func binary() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	const sbin = "/usr/sbin/pgbouncer"
	if _, err := os.Stat(sbin); err == nil {
		return sbin, nil
	}
	return "", fmt.Errorf("pgbouncer is not installed (looked on PATH and in /usr/sbin)")
}

// Start starts PgBouncer on a free port of 127.0.0.1, in transaction mode, pointing at the test
// database (testdb.URL), and stops it when the test ends.
func Start(t testing.TB) *Bouncer {
	t.Helper()
	bin, err := binary()
	if err != nil {
		t.Fatalf("%v: this test needs PgBouncer; install it with: apt-get install -y pgbouncer", err)
	}
	direct := testdb.URL()
	cfg, err := pgx.ParseConfig(direct)
	if err != nil {
		t.Fatal(testdb.Unreachable(err))
	}
	dir := t.TempDir()
	// PgBouncer refuses to run as root: it is started as postgres (-u), which must read the files.
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var lastErr error
	for range 3 { // the free port may be taken between finding and binding it
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		b, err := start(t, bin, dir, cfg, port)
		if err == nil {
			b.DirectURL = direct
			return b
		}
		lastErr = err
	}
	t.Fatalf("pgbouncer did not start: %v", lastErr)
	return nil
}

func start(t testing.TB, bin, dir string, cfg *pgx.ConnConfig, port int) (*Bouncer, error) {
	dbEntry := fmt.Sprintf("host=%s port=%d dbname=%s user=%s", cfg.Host, cfg.Port, cfg.Database, cfg.User)
	if cfg.Password != "" {
		dbEntry += " password=" + cfg.Password
	}
	logFile := filepath.Join(dir, "pgbouncer.log")
	ini := fmt.Sprintf(`[databases]
%s = %s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = %d
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 200
server_lifetime = 3600
server_idle_timeout = 60
ignore_startup_parameters = extra_float_digits
logfile = %s
`, cfg.Database, dbEntry, port, PoolSize, logFile)
	iniPath := filepath.Join(dir, fmt.Sprintf("pgbouncer-%d.ini", port))
	if err := os.WriteFile(iniPath, []byte(ini), 0o644); err != nil {
		return nil, err
	}
	// The log file must be writable by the user PgBouncer runs as.
	if err := os.WriteFile(logFile, nil, 0o666); err != nil {
		return nil, err
	}
	if err := os.Chmod(logFile, 0o666); err != nil {
		return nil, err
	}
	args := []string{iniPath}
	if os.Geteuid() == 0 {
		args = []string{"-u", "postgres", iniPath}
	}
	cmd := exec.Command(bin, args...)
	var out strings.Builder
	var outMu sync.Mutex
	cmd.Stdout = writerFunc(func(p []byte) { outMu.Lock(); out.Write(p); outMu.Unlock() })
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	url := fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable&default_query_exec_mode=cache_describe",
		cfg.User, port, cfg.Database)
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case err := <-exited:
			outMu.Lock()
			defer outMu.Unlock()
			logText, _ := os.ReadFile(logFile)
			return nil, fmt.Errorf("pgbouncer exited (%v): %s %s", err, out.String(), logText)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			err = conn.Ping(ctx)
			_ = conn.Close(ctx)
		}
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			stop()
			logText, _ := os.ReadFile(logFile)
			return nil, fmt.Errorf("pgbouncer on port %d does not answer: %v\n%s", port, err, logText)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(stop)
	return &Bouncer{URL: url, Log: logFile}, nil
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return strconv.Atoi(port)
}

type writerFunc func(p []byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }
