package pronto_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/redistest"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	redisstore "github.com/pronto-jobs/pronto/store/redis"
)

type redisFailArgs struct {
	N int `json:"n"`
}

func (redisFailArgs) Kind() string { return "redisfail.job" }

func insertUntilOK(t *testing.T, c *pronto.Client, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := c.Insert(ctx, redisFailArgs{N: n}, nil)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("insert %d never succeeded: %v", n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitRan(t *testing.T, ran <-chan int, n int, what string) {
	t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		select {
		case got := <-ran:
			if got == n {
				return
			}
		case <-timeout:
			t.Fatalf("job %d never ran (%s)", n, what)
		}
	}
}

// replyDropper is a TCP proxy in front of a Redis that, once armed, closes the client's connection
// instead of forwarding the server's reply to the first command containing match: the command was
// applied by Redis, its reply is lost, as when Redis or the network dies right after a write.
type replyDropper struct {
	l       net.Listener
	target  string
	mu      sync.Mutex
	match   string
	dropped int
}

// listenProxy listens on a free port of 127.0.0.1 until the test ends and serves each connection
// it accepts with serve, in a goroutine of its own: the front of the test proxies below.
func listenProxy(t *testing.T, serve func(c net.Conn)) net.Listener {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return l
}

func startReplyDropper(t *testing.T, target string) *replyDropper {
	p := &replyDropper{target: target}
	p.l = listenProxy(t, p.serve)
	return p
}

func (p *replyDropper) addr() string { return p.l.Addr().String() }

func (p *replyDropper) arm(match string) {
	p.mu.Lock()
	p.match = match
	p.mu.Unlock()
}

func (p *replyDropper) serve(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	var mu sync.Mutex
	doomed := false
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				p.mu.Lock()
				if p.match != "" && bytes.Contains(buf[:n], []byte(p.match)) {
					p.match = ""
					p.dropped++
					mu.Lock()
					doomed = true
					mu.Unlock()
				}
				p.mu.Unlock()
				if _, werr := s.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		_ = s.Close()
		_ = c.Close()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 {
			mu.Lock()
			d := doomed
			mu.Unlock()
			if d {
				break
			}
			if _, werr := c.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = s.Close()
	_ = c.Close()
}

// TestRedisLostReplyNotDuplicate: Redis applies a single insert and the connection drops before its
// reply arrives (Redis killed right after an fsync, a network blip). go-redis used to resend the
// FCALL by itself, and the resent insert found the job's id taken by the first one: the insert
// failed with ErrDuplicate although its job was stored. The store's clients resend nothing now: the
// insert fails as the database went away (its outcome unknown, as on any database), and a retry with
// the same id, the way to make retries exactly-once, is told the job exists.
func TestRedisLostReplyNotDuplicate(t *testing.T) {
	srv := redistest.StartServer(t, "--appendonly", "no")
	px := startReplyDropper(t, srv.Addr())
	ctx := context.Background()
	st, err := redisstore.Open(ctx, "redis://"+px.addr()+"/0", redisstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	c := startClient(t, st, &pronto.Config{})
	_, err = c.Insert(ctx, redisFailArgs{N: 0}, nil) // loads the library
	require.NoError(t, err)

	px.arm("InsertOne")
	id := uuidv7.New()
	_, err = c.Insert(ctx, redisFailArgs{N: 1}, &pronto.InsertOpts{ID: id})
	require.Equal(t, 1, px.dropped, "the proxy dropped the insert's reply")
	require.Error(t, err)
	require.NotErrorIs(t, err, pronto.ErrDuplicate)
	require.True(t, store.IsUnavailable(st, err), "a lost reply reads as the database gone: %v", err)
	n, err := st.Client().HLen(ctx, st.Prefix()+"ids").Result()
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "the job was stored once")

	_, err = c.Insert(ctx, redisFailArgs{N: 1}, &pronto.InsertOpts{ID: id})
	require.ErrorIs(t, err, pronto.ErrDuplicate, "the retry with the same id finds the job stored")
	got, err := c.JobGet(ctx, id)
	require.NoError(t, err)
	require.Equal(t, pronto.StateAvailable, got.State)
}

// TestRedisFullDeletes: a Redis with maxmemory and noeviction is full (inserts refused with
// OOM, as documented). The operator frees memory by deleting jobs through pronto: JobDelete is
// refused with the same OOM error, because every store function is a writing function without
// the allow-oom flag, and Redis refuses those whole while over maxmemory, even when they would
// only delete.
func TestRedisFullDeletes(t *testing.T) {
	srv := redistest.StartServer(t, "--appendonly", "no", "--maxmemory", "3mb", "--maxmemory-policy", "noeviction")
	ctx := context.Background()
	st, err := redisstore.Open(ctx, "redis://"+srv.Addr()+"/0", redisstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	c := startClient(t, st, &pronto.Config{})
	ids := fillToOOM(t, c)
	for _, id := range ids[:10] {
		_, err := c.JobDelete(ctx, id)
		require.NoError(t, err, "deleting a job from a full Redis (what frees its memory) is refused")
	}
}

// TestRedisFullRetentionFrees: completed jobs fill a Redis with maxmemory and noeviction. A
// leader with a short CompletedRetention should delete them and so free the memory, after which
// inserts succeed again. Its cleanup (and its election) are store functions that Redis refuses
// while over maxmemory, so memory is never freed and inserts keep failing.
func TestRedisFullRetentionFrees(t *testing.T) {
	srv := redistest.StartServer(t, "--appendonly", "no")
	ctx := context.Background()
	open := func() *redisstore.Store {
		st, err := redisstore.Open(ctx, "redis://"+srv.Addr()+"/0", redisstore.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	var done sync.WaitGroup
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, job *pronto.Job[redisFailArgs]) error {
		done.Done()
		return nil
	}))
	w := startClient(t, open(), &pronto.Config{Queues: map[string]pronto.QueueConfig{"fill": {MaxWorkers: 20}},
		Workers: workers, DisableMaintenance: true})
	const n = 5000
	var params []pronto.InsertManyParams
	for i := range n {
		params = append(params, pronto.InsertManyParams{Args: redisFailArgs{N: i}, Opts: &pronto.InsertOpts{Queue: "fill"}})
	}
	done.Add(n)
	for i := 0; i < n; i += 500 {
		_, err := w.InsertMany(ctx, params[i:i+500])
		require.NoError(t, err)
	}
	done.Wait()
	require.Eventually(t, func() bool {
		qs, err := w.QueueList(ctx)
		return err == nil && len(qs) == 1 && qs[0].Counts[pronto.StateCompleted] == n
	}, 20*time.Second, 20*time.Millisecond)
	rdb := open().Client()
	// Redis is now full: the memory in use is just above its limit (5000 completed jobs hold far
	// more than the 3% over).
	info, err := rdb.Info(ctx, "memory").Result()
	require.NoError(t, err)
	used, err := strconv.ParseInt(infoField(info, "used_memory"), 10, 64)
	require.NoError(t, err)
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used*97/100, 10)).Err())
	_, err = w.Insert(ctx, redisFailArgs{N: -1}, &pronto.InsertOpts{Queue: "fill"})
	require.ErrorContains(t, err, "OOM")

	// A leader whose retention has every completed job past due.
	m, err := pronto.NewClient(open(), &pronto.Config{CompletedRetention: time.Millisecond, LeaderTTL: time.Second})
	require.NoError(t, err)
	pronto.SetCleanupInterval(m, 50*time.Millisecond)
	startBuilt(t, m)
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := w.Insert(ctx, redisFailArgs{N: -2}, &pronto.InsertOpts{Queue: "fill"})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			qs, _ := m.QueueList(ctx)
			t.Fatalf("retention never freed the memory: insert still fails with %v; queues %+v", err, qs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// infoField returns field name of an INFO answer ("" when absent).
func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), name+":"); ok {
			return v
		}
	}
	return ""
}

// moveSlot moves slot (which holds no keys) from the master serving it to another master of the
// cluster, as a resharding does, and waits until every node agrees.
func moveSlot(t *testing.T, addrs []string, slot int64) (from, to string) {
	t.Helper()
	ctx := context.Background()
	ids := map[string]string{}
	clients := map[string]*goredis.Client{}
	for _, a := range addrs {
		c := goredis.NewClient(&goredis.Options{Addr: a})
		t.Cleanup(func() { _ = c.Close() })
		clients[a] = c
		id, err := c.Do(ctx, "CLUSTER", "MYID").Text()
		require.NoError(t, err)
		ids[a] = id
	}
	for _, a := range addrs {
		n, err := clients[a].Do(ctx, "CLUSTER", "COUNTKEYSINSLOT", slot).Int64()
		require.NoError(t, err)
		require.Zero(t, n)
		//lint:ignore SA1019 CLUSTER SLOTS is what every Redis 7 answers, and simpler to read here
		owner, err := clients[a].ClusterSlots(ctx).Result()
		require.NoError(t, err)
		for _, r := range owner {
			if int64(r.Start) <= slot && slot <= int64(r.End) && r.Nodes[0].Addr == a {
				from = a
			}
		}
	}
	require.NotEmpty(t, from)
	for _, a := range addrs {
		if a != from {
			to = a
			break
		}
	}
	require.NoError(t, clients[to].Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[from]).Err())
	require.NoError(t, clients[from].Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[to]).Err())
	require.NoError(t, clients[to].Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", ids[to]).Err())
	require.NoError(t, clients[from].Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", ids[to]).Err())
	for _, a := range addrs {
		_ = clients[a].Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", ids[to]).Err()
	}
	require.Eventually(t, func() bool {
		for _, a := range addrs {
			//lint:ignore SA1019 as above
			rs, err := clients[a].ClusterSlots(ctx).Result()
			if err != nil {
				return false
			}
			ok := false
			for _, r := range rs {
				if int64(r.Start) <= slot && slot <= int64(r.End) && r.Nodes[0].Addr == to {
					ok = true
				}
			}
			if !ok {
				return false
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond)
	return from, to
}

// TestRedisClusterNotifyAfterReshard: on a Redis Cluster the store's notifications are sharded
// pub/sub on <prefix>{notify}. When a resharding moves that channel's slot to another master, Redis
// ends the shard channel's subscriptions on the old owner (it sends sunsubscribe) without closing the
// connection; go-redis does not subscribe again, and the store's receiver ignores the sunsubscribe.
// From then on the worker's client hears no insert: with a long poll, a job inserted by another
// process after the reshard is not picked up.
func TestRedisClusterNotifyAfterReshard(t *testing.T) {
	addrs := redistest.StartCluster(t)
	ctx := context.Background()
	prefix := "auditnotify:"
	open := func(addr string) *redisstore.Store {
		st, err := redisstore.Open(ctx, "redis://"+addr+"?key_prefix="+prefix, redisstore.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	ran := make(chan int, 100)
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, job *pronto.Job[redisFailArgs]) error {
		ran <- job.Args.N
		return nil
	}))
	b := open(addrs[0])
	startClient(t, b, &pronto.Config{Queues: defaultQueue(4), Workers: workers, PollInterval: time.Hour})
	a := startClient(t, open(addrs[1]), &pronto.Config{PollInterval: time.Hour})
	// The producer's first claim happened at start; from now on only notifications wake it.
	time.Sleep(200 * time.Millisecond)
	insertUntilOK(t, a, 1)
	waitRan(t, ran, 1, "before the reshard")

	slot, err := b.Client().ClusterKeySlot(ctx, prefix+"{notify}").Result()
	require.NoError(t, err)
	from, to := moveSlot(t, addrs, slot)
	t.Logf("moved slot %d of %s{notify} from %s to %s", slot, prefix, from, to)
	insertUntilOK(t, a, 2)
	waitRan(t, ran, 2, "after the notification channel's slot moved")
}

func fillToOOM(t *testing.T, c *pronto.Client) []string {
	t.Helper()
	var ids []string
	for i := 0; ; i++ {
		row, err := c.Insert(context.Background(), redisFailArgs{N: i}, &pronto.InsertOpts{Queue: "fill"})
		if err != nil {
			require.Contains(t, err.Error(), "OOM", "the insert fails for Redis being full")
			require.True(t, store.IsUnavailable(c.Store(), err), "a full Redis is unavailable for now (503 over HTTP), not a bad request: %v", err)
			require.NotEmpty(t, ids)
			return ids
		}
		ids = append(ids, row.ID)
		require.Less(t, i, 500000, "Redis never filled")
	}
}

// freezer is a TCP proxy in front of a Redis whose freeze makes every connection open at that moment
// silent, as a connection left half-open by a partition, a NAT or a load balancer's failover is:
// nothing arrives on it any more and nothing says it is closed. Connections made after work.
type freezer struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	gen    int
}

func startFreezer(t *testing.T, target string) *freezer {
	f := &freezer{target: target}
	f.l = listenProxy(t, func(c net.Conn) {
		s, err := net.Dial("tcp", target)
		if err != nil {
			_ = c.Close()
			return
		}
		t.Cleanup(func() { _ = c.Close(); _ = s.Close() })
		f.mu.Lock()
		gen := f.gen
		f.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			buf := make([]byte, 64<<10)
			for {
				n, err := src.Read(buf)
				if err != nil {
					return
				}
				f.mu.Lock()
				live := f.gen == gen
				f.mu.Unlock()
				if live {
					if _, err := dst.Write(buf[:n]); err != nil {
						return
					}
				}
			}
		}
		go pipe(s, c)
		pipe(c, s)
	})
	return f
}

func (f *freezer) addr() string { return f.l.Addr().String() }

func (f *freezer) freeze() {
	f.mu.Lock()
	f.gen++
	f.mu.Unlock()
}

// TestRedisNotifySilentConnection: the worker's store reaches Redis through a path that leaves its
// connections half-open (frozen) and then accepts new ones. Its pooled connections time out and are
// replaced, but the subscription waits in PubSub.Receive with no deadline and no health check, so it
// never notices: with a long poll, jobs inserted by another process (a batch: published, not handed
// off) are never picked up by push again.
func TestRedisNotifySilentConnection(t *testing.T) {
	srv := redistest.StartServer(t, "--appendonly", "no")
	fz := startFreezer(t, srv.Addr())
	ctx := context.Background()
	open := func(addr string) *redisstore.Store {
		st, err := redisstore.Open(ctx, "redis://"+addr+"/0", redisstore.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	ran := make(chan int, 100)
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, job *pronto.Job[redisFailArgs]) error {
		ran <- job.Args.N
		return nil
	}))
	startClient(t, open(fz.addr()), &pronto.Config{Queues: defaultQueue(4), Workers: workers, PollInterval: time.Hour})
	a := startClient(t, open(srv.Addr()), &pronto.Config{PollInterval: time.Hour})
	insertBatch := func(n int) {
		_, err := a.InsertMany(ctx, []pronto.InsertManyParams{{Args: redisFailArgs{N: n}}, {Args: redisFailArgs{N: n + 1}}})
		require.NoError(t, err)
	}
	time.Sleep(200 * time.Millisecond)
	insertBatch(1)
	waitRan(t, ran, 1, "before the connections went silent")
	fz.freeze()
	// Well past go-redis's read timeout: any command on a silent pooled connection has failed and
	// the connection been replaced by now.
	time.Sleep(10 * time.Second)
	insertBatch(10)
	timeout := time.After(20 * time.Second)
	for {
		select {
		case got := <-ran:
			if got == 10 {
				return
			}
		case <-timeout:
			t.Fatal("job inserted after the worker's connections went silent was never picked up (poll: an hour)")
		}
	}
}

// TestRedisLostClaimReplyReturnsJobs: Redis runs a claim and the connection drops before its reply
// arrives. The claimed jobs, each with one attempt, must come back available with the attempt given
// back (MaxAttempts one more, as a shutdown refunds it), not stay active under a claim nobody holds
// until the rescue discards them at the end of their lease (a minute here, beyond the wait).
func TestRedisLostClaimReplyReturnsJobs(t *testing.T) {
	srv := redistest.StartServer(t, "--appendonly", "no")
	px := startReplyDropper(t, srv.Addr())
	ctx := context.Background()
	var logs lockedBuffer
	st, err := redisstore.Open(ctx, "redis://"+px.addr()+"/0",
		redisstore.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	require.NoError(t, st.Migrate(ctx))
	claim := store.ClaimParams{Queue: "q", Limit: 10, WorkerID: "w", LeaseDuration: time.Minute}
	none, err := st.Claim(ctx, claim) // loads the library
	require.NoError(t, err)
	require.Empty(t, none)

	var want []string
	for range 3 {
		id := uuidv7.New()
		want = append(want, id)
		_, err := st.Insert(ctx, []*store.InsertParams{{ID: id, Kind: "k", Queue: "q", Args: []byte(`{}`),
			State: store.StateAvailable, MaxAttempts: 1}})
		require.NoError(t, err)
	}
	px.arm("_Claim")
	_, err = st.Claim(ctx, claim)
	require.Equal(t, 1, px.dropped, "the proxy dropped the claim's reply")
	require.Error(t, err)

	require.Eventually(t, func() bool {
		for _, id := range want {
			j, err := st.GetJob(ctx, id)
			if err != nil || j.State != store.StateAvailable || j.MaxAttempts-j.Attempt != 1 {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond, "the lost claim's jobs come back, attempts refunded")
	// The recovery logs once its give-back is written: the jobs can be seen back just before.
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "reply was lost") },
		30*time.Second, 10*time.Millisecond, "the claim ran, and the store returned its jobs")
	again, err := st.Claim(ctx, claim)
	require.NoError(t, err)
	require.Len(t, again, 3)
	for _, j := range again {
		require.Contains(t, want, j.ID)
		require.Equal(t, 2, j.Attempt)
		require.Equal(t, 2, j.MaxAttempts)
	}
}
