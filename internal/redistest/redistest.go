// Package redistest starts what the tests of pronto's Redis store need beside the machine's Redis:
// a local Redis Cluster, and private servers to kill and restart.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// StartCluster starts a local Redis Cluster of three masters on free ports (redis-server
// --cluster-enabled yes, then redis-cli --cluster create) and returns their addresses once every
// node reports cluster_state:ok. The servers are killed when the test ends. It fails the test,
// saying what to install, when redis-server or redis-cli is missing.
func StartCluster(t testing.TB) []string {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("the cluster test starts a local Redis Cluster and needs %s on PATH (install Redis 7): %v", bin, err)
		}
	}
	var addrs []string
	for range 3 {
		addrs = append(addrs, startNode(t))
	}
	ctx := context.Background()
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v: %s", err, out)
	}
	for _, a := range addrs {
		c := goredis.NewClient(&goredis.Options{Addr: a})
		deadline := time.Now().Add(20 * time.Second)
		for {
			info, _ := c.ClusterInfo(ctx).Result()
			masters := slotMasters(ctx, c)
			// cluster_state:ok says every slot is served; the node's view must also name each master
			// serving slots by the address clients reach it at (a node learns its own address in the
			// handshake), or a client routing by that view would see fewer masters than there are.
			if strings.Contains(info, "cluster_state:ok") && len(masters) == len(addrs) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster node %s never reported cluster_state:ok with %d masters (masters serving slots: %v):\n%s", a, len(addrs), masters, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = c.Close()
	}
	return addrs
}

// slotMasters returns the masters serving slots in node c's view ("ip:port"), leaving out those
// whose address the view does not know yet.
func slotMasters(ctx context.Context, c *goredis.Client) map[string]bool {
	shards, err := c.ClusterShards(ctx).Result()
	if err != nil {
		return nil
	}
	out := map[string]bool{}
	for _, sh := range shards {
		if len(sh.Slots) == 0 {
			continue
		}
		for _, n := range sh.Nodes {
			if n.Role == "master" && n.IP != "" && n.Health == "online" {
				out[net.JoinHostPort(n.IP, fmt.Sprint(n.Port))] = true
			}
		}
	}
	return out
}

// startNode starts one cluster node and returns its address once it answers. A node needs its port
// and the port 10000 above it (the cluster bus) free; a port that another process takes between
// the check and the start, or a node that does not come up, is tried again on other ports.
func startNode(t testing.TB) string {
	t.Helper()
	var last string
	for range 5 {
		port, ok := freePortPair()
		if !ok {
			continue
		}
		dir := t.TempDir()
		cmd := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", fmt.Sprint(port), "--dir", dir,
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--save", "", "--appendonly", "no")
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatalf("start a cluster node: %v", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
		up := false
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if c.Ping(context.Background()).Err() == nil {
				up = true
				break
			}
			select {
			case <-exited:
				deadline = time.Time{} // it exited: try other ports
			default:
			}
		}
		_ = c.Close()
		if up {
			t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
			return addr
		}
		_ = cmd.Process.Kill()
		<-exited
		last = fmt.Sprintf("node on port %d did not start: %s", port, out.String())
	}
	t.Fatalf("a cluster node did not start in five tries; the last: %s", last)
	return ""
}

// freePortPair returns a port that is free on 127.0.0.1 with the port 10000 above it free too.
func freePortPair() (int, bool) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, false
	}
	port := l.Addr().(*net.TCPAddr).Port
	defer l.Close()
	if port+10000 > 65535 {
		return 0, false
	}
	bus, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+10000))
	if err != nil {
		return 0, false
	}
	_ = bus.Close()
	return port, true
}

// Server is a redis-server of a test's own, on a free port, with a data folder it keeps across
// restarts: for tests that kill, restart or fill a Redis, which the machine's shared one must not be.
type Server struct {
	t    testing.TB
	dir  string
	port int
	args []string
	cmd  *exec.Cmd
}

// StartServer starts a redis-server with args (beside its address, folder and --save "") and
// returns once it answers; it is killed when the test ends.
func StartServer(t testing.TB, args ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("this test starts its own redis-server, which is not on PATH (install Redis 7): %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	r := &Server{t: t, dir: t.TempDir(), port: port, args: args}
	r.Start()
	t.Cleanup(r.Kill)
	return r
}

// Addr is the server's host:port.
func (r *Server) Addr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }

// Start starts the server again after Kill, on the same port and folder, and waits until it
// answers.
func (r *Server) Start() {
	r.t.Helper()
	args := append([]string{"--bind", "127.0.0.1", "--port", fmt.Sprint(r.port), "--dir", r.dir, "--save", ""}, r.args...)
	r.cmd = exec.Command("redis-server", args...)
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: r.Addr(), MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := rdb.Ping(context.Background()).Err()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("the test's redis-server on %s did not answer: %v", r.Addr(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill ends the server as a crash would: SIGKILL, no shutdown save.
func (r *Server) Kill() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
		r.cmd = nil
	}
}
