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
	masters, _ := StartClusterNodes(t, ClusterOptions{})
	addrs := make([]string, len(masters))
	for i, m := range masters {
		addrs[i] = m.Addr
	}
	return addrs
}

// ClusterOptions shape the cluster StartClusterNodes starts.
type ClusterOptions struct {
	// Masters is the number of masters (3 when 0); Replicas the number of replicas of each.
	Masters, Replicas int
	// NodeTimeout is the nodes' cluster-node-timeout (how soon a master is taken for failed and
	// its replica promoted); Redis's default when 0.
	NodeTimeout time.Duration
	// Front, when set, is called with each node's own address before the node starts and returns
	// the address of a proxy in front of it: the node announces that address to the cluster, so
	// clients reach the node through the proxy.
	Front func(real string) string
}

// Node is one redis-server of a cluster StartClusterNodes started.
type Node struct {
	// Addr is the address the cluster announces (Front's when set, else Real); Real the server's
	// own.
	Addr, Real string
	// Client talks to Real; it is closed when the test ends.
	Client *goredis.Client
	cmd    *exec.Cmd
	exited chan struct{}
}

// Kill ends the node as a crash would (SIGKILL) and waits until it is gone.
func (n *Node) Kill() {
	if n.cmd.Process != nil {
		_ = n.cmd.Process.Kill()
	}
	<-n.exited
}

// StartClusterNodes starts a local Redis Cluster as opts says (redis-server --cluster-enabled yes,
// then redis-cli --cluster create) and returns its masters and replicas once every node reports
// cluster_state:ok, names every master serving slots by the address clients reach it at, and every
// replica's link to its master is up. Every node is killed when the test ends. It fails the test,
// saying what to install, when redis-server or redis-cli is missing.
func StartClusterNodes(t testing.TB, opts ClusterOptions) (masters, replicas []*Node) {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("the cluster test starts a local Redis Cluster and needs %s on PATH (install Redis 7): %v", bin, err)
		}
	}
	if opts.Masters == 0 {
		opts.Masters = 3
	}
	var nodes []*Node
	args := []string{"--cluster", "create"}
	for range opts.Masters * (1 + opts.Replicas) {
		n := startNode(t, opts)
		nodes = append(nodes, n)
		args = append(args, n.Real)
	}
	args = append(args, "--cluster-replicas", fmt.Sprint(opts.Replicas), "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v: %s", err, out)
	}
	ctx := context.Background()
	var last string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		masters, replicas, last = clusterUp(ctx, nodes, opts.Masters)
		if last == "" {
			return masters, replicas
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster never came up: %s", last)
		}
	}
}

// clusterUp returns the masters and replicas among nodes when the cluster is up (see
// StartClusterNodes), else what is not up yet.
func clusterUp(ctx context.Context, nodes []*Node, masters int) (ms, rs []*Node, notUp string) {
	for _, n := range nodes {
		info, _ := n.Client.ClusterInfo(ctx).Result()
		if !strings.Contains(info, "cluster_state:ok") {
			return nil, nil, fmt.Sprintf("node %s does not report cluster_state:ok:\n%s", n.Real, info)
		}
		repl, err := n.Client.Info(ctx, "replication").Result()
		switch {
		case err != nil:
			return nil, nil, fmt.Sprintf("node %s: INFO replication: %v", n.Real, err)
		case strings.Contains(repl, "role:master"):
			ms = append(ms, n)
		case !strings.Contains(repl, "master_link_status:up"):
			return nil, nil, fmt.Sprintf("replica %s: its link to its master is not up", n.Real)
		default:
			rs = append(rs, n)
		}
		// A node learns its own address in the handshake: until its view names each master
		// serving slots by the address clients reach it at, a client routing by that view would
		// see fewer masters than there are.
		if seen := slotMasters(ctx, n.Client); len(seen) != masters {
			return nil, nil, fmt.Sprintf("node %s names %d masters serving slots, not %d: %v", n.Real, len(seen), masters, seen)
		}
	}
	if len(ms) != masters {
		return nil, nil, fmt.Sprintf("%d masters, not %d", len(ms), masters)
	}
	return ms, rs, ""
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

// startNode starts one cluster node as opts says and returns it once it answers. A node needs its
// port and the port 10000 above it (the cluster bus) free; a port that another process takes
// between the check and the start, or a node that does not come up, is tried again on other ports.
func startNode(t testing.TB, opts ClusterOptions) *Node {
	t.Helper()
	var last string
	for range 5 {
		port, ok := freePortPair()
		if !ok {
			continue
		}
		dir := t.TempDir()
		n := &Node{Real: fmt.Sprintf("127.0.0.1:%d", port)}
		n.Addr = n.Real
		args := []string{"--bind", "127.0.0.1", "--port", fmt.Sprint(port), "--dir", dir,
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--save", "", "--appendonly", "no"}
		if opts.NodeTimeout > 0 {
			args = append(args, "--cluster-node-timeout", fmt.Sprint(opts.NodeTimeout.Milliseconds()))
		}
		if opts.Front != nil {
			n.Addr = opts.Front(n.Real)
			_, fport, err := net.SplitHostPort(n.Addr)
			if err != nil {
				t.Fatalf("the proxy's address %q: %v", n.Addr, err)
			}
			args = append(args, "--cluster-announce-ip", "127.0.0.1", "--cluster-announce-port", fport,
				"--cluster-announce-bus-port", fmt.Sprint(port+10000))
		}
		n.cmd = exec.Command("redis-server", args...)
		var out strings.Builder
		n.cmd.Stdout, n.cmd.Stderr = &out, &out
		if err := n.cmd.Start(); err != nil {
			t.Fatalf("start a cluster node: %v", err)
		}
		n.exited = make(chan struct{})
		go func() { _ = n.cmd.Wait(); close(n.exited) }()
		c := goredis.NewClient(&goredis.Options{Addr: n.Real, MaxRetries: -1})
		up := false
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if c.Ping(context.Background()).Err() == nil {
				up = true
				break
			}
			select {
			case <-n.exited:
				deadline = time.Time{} // it exited: try other ports
			default:
			}
		}
		if up {
			n.Client = c
			t.Cleanup(func() { _ = c.Close(); n.Kill() })
			return n
		}
		_ = c.Close()
		n.Kill()
		last = fmt.Sprintf("node on port %d did not start: %s", port, out.String())
	}
	t.Fatalf("a cluster node did not start in five tries; the last: %s", last)
	return nil
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
