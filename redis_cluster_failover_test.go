package pronto_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/redistest"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	redisstore "github.com/pronto-jobs/pronto/store/redis"
	"github.com/pronto-jobs/pronto/store/storetest"
)

type failoverArgs struct {
	N int `json:"n"`
}

func (failoverArgs) Kind() string { return "failover.job" }

// droppedReplies returns how many replies p dropped.
func droppedReplies(p *replyDropper) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// failoverNode is one redis-server of a test cluster (redistest.Node), with the reply dropper in
// front of it when the cluster is proxied.
type failoverNode struct {
	*redistest.Node
	dropper *replyDropper
}

// startFailoverCluster starts a Redis Cluster of masters masters with replicas replicas each (node
// timeout 1 s; redistest.StartClusterNodes), each node behind a reply dropper when proxied, and
// returns its masters and replicas once every node agrees and every replica's link is up. Every
// node is killed when the test ends.
func startFailoverCluster(t *testing.T, masters, replicas int, proxied bool) (ms, rs []*failoverNode) {
	t.Helper()
	droppers := map[string]*replyDropper{}
	opts := redistest.ClusterOptions{Masters: masters, Replicas: replicas, NodeTimeout: time.Second}
	if proxied {
		opts.Front = func(real string) string {
			droppers[real] = startReplyDropper(t, real)
			return droppers[real].addr()
		}
	}
	rm, rr := redistest.StartClusterNodes(t, opts)
	for _, n := range rm {
		ms = append(ms, &failoverNode{n, droppers[n.Real]})
	}
	for _, n := range rr {
		rs = append(rs, &failoverNode{n, droppers[n.Real]})
	}
	return ms, rs
}

// proxiedClusterStore starts a 3-master cluster whose nodes sit behind reply droppers
// (startFailoverCluster) and opens a store on it under a key prefix of its own, closed when the
// test ends; it returns the masters, the store and its prefix.
func proxiedClusterStore(t *testing.T) ([]*failoverNode, *redisstore.Store, string) {
	t.Helper()
	ms, _ := startFailoverCluster(t, 3, 0, true)
	prefix := "failover:" + uuidv7.New() + ":"
	st, err := redisstore.Open(context.Background(), "redis://"+ms[0].Addr+"?key_prefix="+prefix, redisstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return ms, st, prefix
}

// slotOwner returns the master among ms that serves key's slot (by its own view).
func slotOwner(t *testing.T, ms []*failoverNode, key string) *failoverNode {
	t.Helper()
	ctx := context.Background()
	slot, err := ms[0].Client.ClusterKeySlot(ctx, key).Result()
	require.NoError(t, err)
	for _, m := range ms {
		// A master answers EXISTS for its own slots, MOVED otherwise.
		if err := m.Client.Exists(ctx, key).Err(); err == nil {
			return m
		}
	}
	t.Fatalf("no master serves %s (slot %d)", key, slot)
	return nil
}

// TestRedisClusterLostReplyNotDuplicate: on a Redis Cluster, the registration of an insert's ids
// loses its reply (the proxy in front of the id index's master closes the connection after Redis
// applied it). The cluster client does not send it again (it would find its own ids and call a
// fresh job a duplicate): the insert fails as unavailable, and its retry with the same id stores
// the job, or is told it exists and it does (docs/redis.md, "No resent commands";
// TestRedisLostReplyNotDuplicate on a single node).
func TestRedisClusterLostReplyNotDuplicate(t *testing.T) {
	t.Parallel()
	ms, st, prefix := proxiedClusterStore(t)
	ctx := context.Background()
	_, isCluster := st.Client().(*goredis.ClusterClient)
	require.True(t, isCluster)
	c := startClient(t, st, &pronto.Config{})
	_, err := c.Insert(ctx, failoverArgs{N: 0}, nil) // loads the library
	require.NoError(t, err)

	owner := slotOwner(t, ms, prefix+"ids")
	owner.dropper.arm("_RegisterIDs")
	id := uuidv7.New()
	_, err = c.Insert(ctx, failoverArgs{N: 1}, &pronto.InsertOpts{ID: id})
	require.Equal(t, 1, droppedReplies(owner.dropper), "the proxy dropped the registration's reply")
	require.Error(t, err, "the insert's reply was lost: its outcome is unknown")
	require.NotErrorIs(t, err, pronto.ErrDuplicate, "a fresh id is reported a duplicate (the lost command was resent): %v", err)
	require.ErrorIs(t, err, redisstore.ErrReplyLost)
	require.True(t, store.IsUnavailable(st, err), "a lost reply reads as the database gone: %v", err)

	_, err = c.Insert(ctx, failoverArgs{N: 1}, &pronto.InsertOpts{ID: id})
	if err != nil {
		require.ErrorIs(t, err, pronto.ErrDuplicate)
	}
	got, err := c.JobGet(ctx, id)
	require.NoError(t, err, "the job whose retry was told it exists is stored")
	require.Equal(t, pronto.StateAvailable, got.State)
}

// queueOnMaster returns a queue name whose keys live on master m.
func queueOnMaster(t *testing.T, ms []*failoverNode, m *failoverNode, prefix string) string {
	t.Helper()
	for i := range 10000 {
		q := fmt.Sprintf("q%d", i)
		if slotOwner(t, ms, prefix+"{q:"+q+"}:") == m {
			return q
		}
	}
	t.Fatal("no queue found")
	return ""
}

// replicaOf returns the replica among rs of master m.
func replicaOf(t *testing.T, m *failoverNode, rs []*failoverNode) *failoverNode {
	t.Helper()
	ctx := context.Background()
	id, err := m.Client.Do(ctx, "CLUSTER", "MYID").Text()
	require.NoError(t, err)
	for _, r := range rs {
		nodes, err := r.Client.ClusterNodes(ctx).Result()
		require.NoError(t, err)
		for _, line := range strings.Split(nodes, "\n") {
			f := strings.Fields(line)
			if len(f) > 3 && strings.Contains(f[2], "myself") && f[3] == id {
				return r
			}
		}
	}
	t.Fatal("no replica found")
	return nil
}

// waitPromoted waits until r is a master and every other live node reports the cluster ok.
func waitPromoted(t *testing.T, r *failoverNode, live []*failoverNode) {
	t.Helper()
	ctx := context.Background()
	require.Eventually(t, func() bool {
		repl, err := r.Client.Info(ctx, "replication").Result()
		if err != nil || !strings.Contains(repl, "role:master") {
			return false
		}
		for _, n := range live {
			info, err := n.Client.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
		}
		return true
	}, 60*time.Second, 50*time.Millisecond, "the replica was never promoted")
}

// TestRedisClusterKilledMasterWorkersResume: a 3-master, 3-replica cluster (node timeout 1 s); a
// worker client serves a queue on every master. A master is SIGKILLed and its replica promoted.
// The running worker client, whose calls to the dead master fail with "connection refused" (a dead
// master never answers MOVED), reloads its slot map and works a job inserted into the killed
// master's queue after the promotion, well before go-redis's periodic reload (a minute).
func TestRedisClusterKilledMasterWorkersResume(t *testing.T) {
	t.Parallel()
	ms, rs := startFailoverCluster(t, 3, 1, false)
	ctx := context.Background()
	prefix := "failover:" + uuidv7.New() + ":"
	// The victim serves neither the id index nor the notification channel.
	busy := map[*failoverNode]bool{slotOwner(t, ms, prefix+"ids"): true, slotOwner(t, ms, prefix+"{notify}"): true, slotOwner(t, ms, prefix+"queues"): true}
	var victim *failoverNode
	for _, m := range ms {
		if !busy[m] {
			victim = m
		}
	}
	if victim == nil {
		victim = ms[0]
	}
	url := "redis://" + ms[0].Addr + "?addr=" + ms[1].Addr + "&addr=" + ms[2].Addr + "&key_prefix=" + prefix
	open := func() *redisstore.Store {
		st, err := redisstore.Open(ctx, url, redisstore.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	queues := map[string]pronto.QueueConfig{}
	var vq string
	for _, m := range ms {
		q := queueOnMaster(t, ms, m, prefix)
		queues[q] = pronto.QueueConfig{MaxWorkers: 4}
		if m == victim {
			vq = q
		}
	}
	ran := make(chan int, 1000)
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, job *pronto.Job[failoverArgs]) error {
		ran <- job.Args.N
		return nil
	}))
	startClient(t, open(), &pronto.Config{Queues: queues, Workers: workers})
	ins := startClient(t, open(), &pronto.Config{})
	insert := func(q string, n int) {
		deadline := time.Now().Add(90 * time.Second)
		for {
			ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := ins.Insert(ictx, failoverArgs{N: n}, &pronto.InsertOpts{Queue: q})
			cancel()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("insert %d into %s never succeeded: %v", n, q, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	wait := func(n int, within time.Duration, what string) {
		timeout := time.After(within)
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
	insert(vq, 1)
	wait(1, 15*time.Second, "before the failover")

	replica := replicaOf(t, victim, rs)
	var live []*failoverNode
	victim.Kill()
	for _, n := range append(append([]*failoverNode{}, ms...), rs...) {
		if n != victim {
			live = append(live, n)
		}
	}
	waitPromoted(t, replica, live)
	// A store opened now knows the new master: its insert goes through at once.
	fresh := startClient(t, open(), &pronto.Config{})
	_, err := fresh.Insert(ctx, failoverArgs{N: 2}, &pronto.InsertOpts{Queue: vq})
	require.NoError(t, err)
	// The worker client finds the new master once its calls to the dead one fail.
	wait(2, 20*time.Second, "20 s after the promotion (the cluster was ok again)")
}

// TestRedisClusterLostInsertReplyNotRunTwice: the insert script of one job of tenant t1 loses its
// reply on a Redis Cluster. The script is not run again (it would write and count the job twice):
// the insert fails, one job is stored, and the tenant counts one available job.
func TestRedisClusterLostInsertReplyNotRunTwice(t *testing.T) {
	t.Parallel()
	ms, st, prefix := proxiedClusterStore(t)
	ctx := context.Background()
	c := startClient(t, st, &pronto.Config{})
	_, err := c.Insert(ctx, failoverArgs{N: 0}, &pronto.InsertOpts{Queue: "other"}) // loads the library
	require.NoError(t, err)

	owner := slotOwner(t, ms, prefix+"{q:tq}:")
	owner.dropper.arm("_Insert\r\n")
	_, insErr := c.Insert(ctx, failoverArgs{N: 1}, &pronto.InsertOpts{Queue: "tq", Tenant: "t1"})
	require.Equal(t, 1, droppedReplies(owner.dropper), "the proxy dropped the insert script's reply")

	info, err := st.GetTenant(ctx, "t1")
	require.NoError(t, err)
	jobs, err := c.JobList(ctx, &pronto.JobListParams{Queues: []string{"tq"}})
	require.NoError(t, err)
	require.Len(t, jobs.Jobs, 1, "one job stored")
	require.EqualValues(t, 1, info.Counts[store.StateAvailable], "tenant t1 has one available job, counted %d (the insert script ran twice)", info.Counts[store.StateAvailable])
	require.ErrorIs(t, insErr, redisstore.ErrReplyLost, "the insert's reply was lost: it must not report success")
}

// TestRedisClusterLostWorkflowReplyGivesIDsBack: on a Redis Cluster, each step of the insert of a
// workflow spanning three queues (three masters) loses its reply in turn: the registration of the
// workflow and its job ids, one queue's part, one queue's release of its held roots. The insert
// gives back what it registered when nothing of the workflow is stored, or completes it (the
// release is idempotent and is sent once more), as the other inserts give their ids back: no
// registration is left pending for Cleanup, and a retry with the same ids stores the workflow or is
// told it exists, and it does, every job found by id.
func TestRedisClusterLostWorkflowReplyGivesIDsBack(t *testing.T) {
	t.Parallel()
	ms, st, prefix := proxiedClusterStore(t)
	ctx := context.Background()
	require.NoError(t, st.Migrate(ctx))
	var queues []string
	for _, m := range ms {
		queues = append(queues, queueOnMaster(t, ms, m, prefix))
	}
	ids := slotOwner(t, ms, prefix+"ids")
	pending := prefix + "wfp{" + prefix + "ids}"

	for _, tc := range []struct {
		name  string
		node  *failoverNode
		match string
	}{
		{"registration", ids, "_RegisterWorkflow"},
		{"part", slotOwner(t, ms, prefix+"{q:"+queues[1]+"}:"), "_InsertWorkflow"},
		{"release", slotOwner(t, ms, prefix+"{q:"+queues[2]+"}:"), "_ReleaseHeld"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wf := uuidv7.New()
			a := storetest.WorkflowJob(wf, queues[0])
			b := storetest.WorkflowJob(wf, queues[1], a)
			c := storetest.WorkflowJob(wf, queues[2], b)
			p := store.WorkflowParams{ID: wf, Jobs: []*store.InsertParams{a, b, c}}
			before := droppedReplies(tc.node.dropper)
			tc.node.dropper.arm(tc.match)
			_, _, insErr := st.InsertWorkflow(ctx, p)
			require.Equal(t, before+1, droppedReplies(tc.node.dropper), "the proxy dropped the reply")

			err := ids.Client.ZScore(ctx, pending, wf).Err()
			require.ErrorIs(t, err, goredis.Nil, "the registration is left pending for Cleanup (insert: %v)", insErr)
			_, _, err = st.InsertWorkflow(ctx, p)
			if err != nil {
				require.ErrorIs(t, err, store.ErrDuplicate, "the retry of the insert (first: %v)", insErr)
			}
			w, err := st.GetWorkflow(ctx, wf)
			require.NoError(t, err, "the workflow the retry was told exists (first insert: %v)", insErr)
			require.Equal(t, 3, w.Total)
			for _, jp := range p.Jobs {
				_, err := st.GetJob(ctx, jp.ID)
				require.NoError(t, err, "job %s of the workflow", jp.ID)
			}
			root, err := st.GetJob(ctx, a.ID)
			require.NoError(t, err)
			require.Equal(t, store.StateAvailable, root.State, "the root is released")
		})
	}
}
