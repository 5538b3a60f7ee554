package redis

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/redistest"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/storetest"
)

// startCluster starts a local 3-master Redis Cluster (redistest.StartCluster) and returns its
// nodes' addresses.
func startCluster(t testing.TB) []string { return redistest.StartCluster(t) }

// clusterClient starts a local 3-master cluster (startCluster) and returns a client of it, closed
// when the test ends.
func clusterClient(t testing.TB) *goredis.ClusterClient {
	rdb := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: startCluster(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// migratedCluster starts a local cluster, opens a migrated store on it and names a queue on each
// master.
func migratedCluster(t *testing.T) (*goredis.ClusterClient, *Store, []string) {
	t.Helper()
	rdb := clusterClient(t)
	s := clusterStore(t, rdb)
	require.NoError(t, s.Migrate(context.Background()))
	return rdb, s, queuesOnEachMaster(t, rdb, s)
}

// clusterStore opens a store on rdb, closed when the test ends.
func clusterStore(t testing.TB, rdb *goredis.ClusterClient) *Store {
	s, err := New(context.Background(), rdb, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestCluster runs the store on a local 3-master Redis Cluster: queues whose slots are on every
// master go through the whole lifecycle (insert, unique keys, claim, finish with tokens, heartbeat,
// rescue, listing, counts, pause, cancel and retry, cleanup, notifications, leadership, cron), and a
// workflow spanning queues (slots) is taken.
func TestCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, s, queues := migratedCluster(t)
	// Every master loses the store's function library (as a restart without persistence would):
	// the first call to find it missing loads it on every master again.
	require.NoError(t, rdb.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error {
		return m.FunctionFlush(ctx).Err()
	}))

	got := make(chan store.Notification, 1000)
	defer s.Notifier().Subscribe(func(n store.Notification) {
		select {
		case got <- n:
		default:
		}
	})()

	var all []*store.InsertParams
	for _, q := range queues {
		for range 10 {
			all = append(all, testJob(q))
		}
	}
	u := testJob(queues[0])
	u.UniqueKey = "only-one"
	all = append(all, u)
	_, err := s.Insert(ctx, all) // one batch over three masters
	require.NoError(t, err)
	dup := testJob(queues[0])
	dup.UniqueKey = "only-one"
	_, err = s.Insert(ctx, []*store.InsertParams{dup})
	require.ErrorIs(t, err, store.ErrUniqueConflict)

	seen := map[string]bool{}
	deadline := time.After(10 * time.Second)
	for len(seen) < 3 {
		select {
		case n := <-got:
			if n.Kind == store.NotifyInsert {
				seen[n.Queue] = true
			}
		case <-deadline:
			t.Fatalf("insert notifications of every queue: got %v", seen)
		}
	}

	for i, q := range queues {
		jobs, err := s.Claim(ctx, store.ClaimParams{Queue: q, Limit: 100, WorkerID: "w", LeaseDuration: time.Hour})
		require.NoError(t, err)
		want := 10
		if i == 0 {
			want = 11
		}
		require.Len(t, jobs, want, "queue %s", q)
		lost, err := s.Heartbeat(ctx, store.HeartbeatParams{WorkerID: "w", IDs: []string{jobs[0].ID},
			Tokens: []string{jobs[0].ClaimToken}, LeaseDuration: time.Hour})
		require.NoError(t, err)
		require.Empty(t, lost)
		var cs []store.Completion
		for _, j := range jobs[:5] {
			cs = append(cs, store.Completion{ID: j.ID, Attempt: 1, Token: j.ClaimToken, State: store.StateCompleted})
		}
		cs = append(cs, store.Completion{ID: jobs[5].ID, Attempt: 1, Token: "stale", State: store.StateCompleted})
		res, err := s.Finish(ctx, cs)
		require.NoError(t, err)
		for k, r := range res {
			require.Equal(t, k < 5, r.Applied)
		}
		// A short lease for one job, which the rescuer takes back.
		short := testJob(q)
		_, err = s.Insert(ctx, []*store.InsertParams{short})
		require.NoError(t, err)
		_, err = s.Claim(ctx, store.ClaimParams{Queue: q, Limit: 1, WorkerID: "dead", LeaseDuration: time.Millisecond})
		require.NoError(t, err)
	}
	time.Sleep(10 * time.Millisecond)
	rescued, err := s.Rescue(ctx, store.RescueParams{Limit: 100})
	require.NoError(t, err)
	require.Len(t, rescued.Requeued, 3, "one job per master rescued")

	qs, err := s.ListQueues(ctx)
	require.NoError(t, err)
	require.Len(t, qs, 3)
	for _, qi := range qs {
		require.Equal(t, int64(5), qi.Counts[store.StateCompleted])
		require.Equal(t, int64(1), qi.Counts[store.StateAvailable])
	}
	page, next, err := s.ListJobs(ctx, store.ListParams{States: []store.State{store.StateActive}, Limit: 7})
	require.NoError(t, err)
	require.Len(t, page, 7)
	require.NotEmpty(t, next)

	j, err := s.CancelJob(ctx, page[0].ID)
	require.NoError(t, err)
	require.Equal(t, store.StateCancelled, j.State)
	j, err = s.RetryJob(ctx, page[0].ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, j.State)

	require.NoError(t, s.PauseQueue(ctx, queues[1]))
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: queues[1], Limit: 10, WorkerID: "w", LeaseDuration: time.Hour})
	require.NoError(t, err)
	require.Empty(t, jobs, "a paused queue gives nothing")
	require.NoError(t, s.ResumeQueue(ctx, queues[1]))

	n, err := s.Cleanup(ctx, store.CleanupParams{CompletedBefore: time.Now().Add(time.Hour), Limit: 100})
	require.NoError(t, err)
	require.Equal(t, 15, n)

	ok, err := s.Elect(ctx, "maint", "a", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = s.Elect(ctx, "maint", "b", time.Minute)
	require.NoError(t, err)
	require.False(t, ok)

	require.NoError(t, s.CronCreate(ctx, &store.CronSchedule{Name: "c", ID: uuidv7.New(), Expression: "@every 1m",
		Enabled: true, NextRunAt: time.Now().Add(-time.Second), Template: []byte(`{}`)}))
	due, err := s.CronDue(ctx, time.Now(), 10)
	require.NoError(t, err)
	require.Len(t, due, 1)

	// A workflow in one queue runs in its slot (TestClusterWorkflows); one spanning queues is split
	// into a part per queue (TestClusterSplitWorkflows).
	wf := uuidv7.New()
	member := testJob(queues[0])
	member.WorkflowID = wf
	other := testJob(queues[1])
	other.WorkflowID = wf
	w, _, err := s.InsertWorkflow(ctx, store.WorkflowParams{ID: wf, Jobs: []*store.InsertParams{member, other}})
	require.NoError(t, err)
	require.Equal(t, 2, w.Total)
	require.Equal(t, 2, w.Counts[store.StateAvailable])
}

// TestClusterStore runs the shared behaviour suite against a local 3-master Redis Cluster, each
// test under a key prefix of its own (its queues land on all three masters). Rate and tenant limits
// run there through their permit ledgers (ratelimit.go), and workflows spanning queues as one part
// per queue (relay.go).
func TestClusterStore(t *testing.T) {
	t.Parallel()
	rdb := clusterClient(t)
	open := func(t *testing.T, prefix string) store.Store {
		s, err := New(context.Background(), rdb, Options{Prefix: prefix})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	storetest.Run(t, storetest.Harness{
		New:    func(t *testing.T) store.Store { return open(t, "prontotest:"+uuidv7.New()+":") },
		Reopen: func(t *testing.T, s store.Store) store.Store { return open(t, s.(*Store).Prefix()) },
	})
}

// TestClusterTenants checks the tenant features on a local 3-master Redis Cluster, in queues served
// by each master: weights stored before a queue exists reach it with its first insert, changed
// weights reach every queue, a queue's stale copy of the weights is what its claims follow until
// Cleanup repairs it, and counts, the tenant list and a tenant's jobs span the queues.
func TestClusterTenants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, s, queues := migratedCluster(t)

	claimTenants := func(q string, n int) map[string]int {
		t.Helper()
		got := map[string]int{}
		for range n {
			jobs, err := s.Claim(ctx, store.ClaimParams{Queue: q, Limit: 1, WorkerID: "w", LeaseDuration: time.Minute})
			require.NoError(t, err)
			require.Len(t, jobs, 1)
			got[jobs[0].Tenant]++
		}
		return got
	}

	// Stored before any queue exists: each queue gets it with its first insert.
	require.NoError(t, s.SetTenantWeight(ctx, "A", 3))
	var aIDs []string
	for _, q := range queues {
		var batch []*store.InsertParams
		for i := range 40 {
			j := testJob(q)
			j.Tenant = "A"
			if i%2 == 1 {
				j.Tenant = "B"
			} else {
				aIDs = append(aIDs, j.ID)
			}
			batch = append(batch, j)
		}
		_, err := s.Insert(ctx, batch)
		require.NoError(t, err)
	}
	for _, q := range queues {
		require.Equal(t, map[string]int{"A": 3, "B": 1}, claimTenants(q, 4), "queue %s: A weighs 3", q)
	}

	// Changed while the queues exist: every queue follows.
	require.NoError(t, s.SetTenantWeight(ctx, "B", 2))
	for _, q := range queues {
		require.Equal(t, map[string]int{"A": 3, "B": 2}, claimTenants(q, 5), "queue %s: A 3, B 2", q)
	}

	// A queue's copy is what its claims read; Cleanup puts the stored weights back into it.
	stale := queues[len(queues)-1]
	require.NoError(t, rdb.HSet(ctx, s.qkey(stale)+"tw", "A", 1, "B", 1).Err())
	require.Equal(t, map[string]int{"A": 2, "B": 2}, claimTenants(stale, 4), "the stale copy: A and B weigh 1")
	_, err := s.Cleanup(ctx, store.CleanupParams{})
	require.NoError(t, err)
	require.Equal(t, map[string]int{"A": 3, "B": 2}, claimTenants(stale, 5), "repaired by Cleanup")

	// Counts, the list and the jobs of a tenant span the queues (on every master). Claimed so far:
	// A 3+3 and B 1+2 in each queue, and A 2+3 and B 2+2 more in the stale one.
	activeA, activeB := int64(6*len(queues)+5), int64(3*len(queues)+4)
	info, err := s.GetTenant(ctx, "A")
	require.NoError(t, err)
	require.Equal(t, 3, info.Weight)
	require.Equal(t, map[store.State]int64{store.StateActive: activeA, store.StateAvailable: 20*int64(len(queues)) - activeA},
		info.Counts, "A's jobs in every queue")
	list, err := s.ListTenants(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "A", list[0].Tenant)
	require.Equal(t, "B", list[1].Tenant)
	require.Equal(t, activeB, list[1].Counts[store.StateActive])
	require.Equal(t, 2, list[1].Weight)

	var listed []string
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 100)
		page, next, err := s.ListJobs(ctx, store.ListParams{Tenant: "A", Limit: 7, After: cursor})
		require.NoError(t, err)
		for _, j := range page {
			require.Equal(t, "A", j.Tenant)
			listed = append(listed, j.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	slices.Sort(aIDs)
	require.Equal(t, aIDs, listed, "every job of A, across the queues, in id order, once")

	// Forgotten, A weighs 1 again everywhere.
	require.NoError(t, s.DeleteTenantWeight(ctx, "A"))
	require.NoError(t, s.DeleteTenantWeight(ctx, "B"))
	for _, q := range queues[:len(queues)-1] {
		require.Equal(t, map[string]int{"A": 2, "B": 2}, claimTenants(q, 4), "queue %s: no weights", q)
	}
}

// TestOpenCluster: Open finds a Redis Cluster by itself, from a URL naming one of its nodes or
// from one naming several seeds, and the store it returns works across the masters; a database
// other than 0 is refused on a cluster, naming the reason.
func TestOpenCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	addrs := startCluster(t)
	urls := []string{
		"redis://" + addrs[1],
		"redis://" + addrs[0] + "/0?addr=" + addrs[1] + "&addr=" + addrs[2] + "&dial_timeout=3s",
	}
	for _, u := range urls {
		s, err := Open(ctx, u+sep(u)+"key_prefix=open:"+uuidv7.New()+":", Options{})
		require.NoError(t, err, u)
		require.True(t, s.cluster(), "%s opens a cluster client", u)
		require.NoError(t, CheckURL(u))
		require.NoError(t, s.Migrate(ctx))
		qs := queuesOnEachMaster(t, s.rdb.(*goredis.ClusterClient), s)
		var batch []*store.InsertParams
		for _, q := range qs {
			batch = append(batch, testJob(q))
		}
		_, err = s.Insert(ctx, batch)
		require.NoError(t, err)
		for _, q := range qs {
			jobs, err := s.Claim(ctx, store.ClaimParams{Queue: q, Limit: 5, WorkerID: "w", LeaseDuration: time.Minute})
			require.NoError(t, err)
			require.Len(t, jobs, 1, "queue %s's job, on its master", q)
		}
		require.NoError(t, s.Close())
	}
	_, err := Open(ctx, "redis://"+addrs[0]+"/3", Options{})
	require.ErrorContains(t, err, "a Redis Cluster has database 0 only")

	// A notifier opened on one node of the cluster hears what another one, opened with seeds,
	// publishes (sharded pub/sub reaches the channel's master from any node).
	ch := "opentest:{" + uuidv7.New() + "}"
	sub, err := OpenNotifier(ctx, "redis://"+addrs[2]+"?channel="+ch)
	require.NoError(t, err)
	defer sub.Close()
	pub, err := OpenNotifier(ctx, "redis://"+addrs[0]+"?addr="+addrs[1]+"&channel="+ch)
	require.NoError(t, err)
	defer pub.Close()
	heard := make(chan store.Notification, 1)
	defer sub.Subscribe(func(n store.Notification) {
		select {
		case heard <- n:
		default:
		}
	})()
	require.NoError(t, pub.Publish(ctx, []store.Notification{{Kind: store.NotifyInsert, Queue: "q", Nonce: 7}}))
	select {
	case n := <-heard:
		require.Equal(t, "q", n.Queue)
	case <-time.After(10 * time.Second):
		t.Fatal("the notification published through one node was not heard through another")
	}
}

// sep returns the separator that adds a query parameter to u.
func sep(u string) string {
	if strings.Contains(u, "?") {
		return "&"
	}
	return "?"
}

// TestClusterListingAndPruneAcrossSlots: on a 3-master cluster, paging
// ListJobs by cursor over three queues (ascending, descending, by tenant) returns every job once in
// id order, and the dead-letter bound by count (PruneCandidates, DeleteDiscarded, PruneDiscarded
// with Keep) counts across the queues' slots.
func TestClusterListingAndPruneAcrossSlots(t *testing.T) {
	t.Parallel()
	_, s, queues := migratedCluster(t)
	ctx := context.Background()
	var ps []*store.InsertParams
	want := map[string]bool{}
	wantT := map[string]bool{}
	for i := range 600 {
		p := testJob(queues[i%3])
		if i%2 == 0 {
			p.Tenant = "acme"
			wantT[p.ID] = true
		}
		ps = append(ps, p)
		want[p.ID] = true
	}
	_, err := s.Insert(ctx, ps)
	require.NoError(t, err)
	for _, desc := range []bool{false, true} {
		for _, tenant := range []string{"", "acme"} {
			seen := map[string]bool{}
			cursor := ""
			last := ""
			for {
				p := store.ListParams{Limit: 37, After: cursor, Descending: desc, Tenant: tenant}
				jobs, next, err := s.ListJobs(ctx, p)
				require.NoError(t, err)
				for _, j := range jobs {
					require.False(t, seen[j.ID], "dup %s", j.ID)
					if last != "" {
						if desc {
							require.Less(t, j.ID, last)
						} else {
							require.Greater(t, j.ID, last)
						}
					}
					last = j.ID
					seen[j.ID] = true
				}
				if next == "" {
					break
				}
				cursor = next
			}
			w := want
			if tenant != "" {
				w = wantT
			}
			require.Equal(t, len(w), len(seen), "desc %v tenant %q", desc, tenant)
		}
	}
	for _, q := range queues {
		jobs, err := s.Claim(ctx, store.ClaimParams{Queue: q, Limit: 1000, WorkerID: "w", LeaseDuration: time.Hour})
		require.NoError(t, err)
		var cs []store.Completion
		for _, j := range jobs {
			cs = append(cs, store.Completion{ID: j.ID, Attempt: 1, Token: j.ClaimToken, State: store.StateDiscarded})
		}
		_, err = s.Finish(ctx, cs)
		require.NoError(t, err)
	}
	cands, err := s.PruneCandidates(ctx, store.PruneParams{Keep: 100, Limit: 1000})
	require.NoError(t, err)
	require.Len(t, cands, 500)
	m, err := s.DeleteDiscarded(ctx, cands[:250])
	require.NoError(t, err)
	tot := 0
	for _, v := range m {
		tot += v
	}
	require.Equal(t, 250, tot)
	m, err = s.PruneDiscarded(ctx, store.PruneParams{Keep: 100, Limit: 1000})
	require.NoError(t, err)
	tot = 0
	for _, v := range m {
		tot += v
	}
	require.Equal(t, 250, tot)
	left, _, err := s.ListJobs(ctx, store.ListParams{Limit: 1000, States: []store.State{store.StateDiscarded}})
	require.NoError(t, err)
	require.Len(t, left, 100)
}

// TestClusterInsertOfStoredJobIsDuplicate: on a cluster the id index and a job's hash are written
// by two calls. An insert whose script ran but whose reply was lost gives its ids back (it cannot
// tell), so its retry registers the ids again; the insert script then finds the job's hash and
// refuses the batch as a duplicate, writing and counting nothing twice, and the job is found by
// id again.
func TestClusterInsertOfStoredJobIsDuplicate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, s, queues := migratedCluster(t)
	stored := testJob(queues[0])
	stored.Tenant = "t1"
	_, err := s.Insert(ctx, []*store.InsertParams{stored})
	require.NoError(t, err)
	require.NoError(t, rdb.HDel(ctx, s.idsKey(), stored.ID).Err())

	other := testJob(queues[1]) // a batch spanning queues is refused whole
	_, err = s.Insert(ctx, []*store.InsertParams{other, stored})
	require.ErrorIs(t, err, store.ErrDuplicate)

	got, err := s.GetJob(ctx, stored.ID)
	require.NoError(t, err, "the stored job is found by id again")
	require.Equal(t, store.StateAvailable, got.State)
	_, err = s.GetJob(ctx, other.ID)
	require.ErrorIs(t, err, store.ErrNotFound, "the refused batch's other job is not stored")
	info, err := s.GetTenant(ctx, "t1")
	require.NoError(t, err)
	require.EqualValues(t, 1, info.Counts[store.StateAvailable], "the job is counted once")
	_, err = s.Insert(ctx, []*store.InsertParams{other})
	require.NoError(t, err, "the refused batch's ids were given back")
}
