package redis

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// The tests below hold the store to docs/redis.md's promise that memory per job is bounded: once a
// job is deleted (retention, pruning, DeleteJob, a completion that removes it), nothing it made the
// store write stays behind, whatever unique key, rate key or tenant it carried.

// keysUnder lists every key under prefix, on every master of a cluster.
func keysUnder(t *testing.T, rdb goredis.UniversalClient, prefix string) []string {
	t.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	var out []string
	scan := func(ctx context.Context, c goredis.Cmdable) error {
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var local []string
		for iter.Next(ctx) {
			local = append(local, iter.Val())
		}
		mu.Lock()
		out = append(out, local...)
		mu.Unlock()
		return iter.Err()
	}
	if cc, ok := rdb.(*goredis.ClusterClient); ok {
		require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error { return scan(ctx, m) }))
	} else {
		require.NoError(t, scan(ctx, rdb))
	}
	sort.Strings(out)
	return out
}

// leftNaming returns the keys under s's prefix, and the members of its sets and sorted sets, that
// contain mark (without the prefix): what deleted jobs marked so left behind.
func leftNaming(t *testing.T, s *Store, mark string) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	for _, k := range keysUnder(t, s.rdb, s.Prefix()) {
		name := strings.TrimPrefix(k, s.Prefix())
		if strings.Contains(k, mark) {
			out = append(out, name)
			continue
		}
		var members []string
		switch s.rdb.Type(ctx, k).Val() {
		case "set":
			members = s.rdb.SMembers(ctx, k).Val()
		case "zset":
			members = s.rdb.ZRange(ctx, k, 0, -1).Val()
		}
		for _, m := range members {
			if strings.Contains(m, mark) {
				out = append(out, name+" ∋ "+m)
			}
		}
	}
	return out
}

// completeAll claims every job of queue (want of them) and completes it.
func completeAll(t *testing.T, s *Store, queue string, want int) {
	t.Helper()
	ctx := context.Background()
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: queue, Limit: 1000, WorkerID: "w", LeaseDuration: time.Hour})
	require.NoError(t, err)
	require.Len(t, jobs, want)
	cs := make([]store.Completion, 0, len(jobs))
	for _, j := range jobs {
		cs = append(cs, store.Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateCompleted})
	}
	res, err := s.Finish(ctx, cs)
	require.NoError(t, err)
	for _, r := range res {
		require.True(t, r.Applied)
	}
}

// retainNone runs retention over every finished job, expecting it to delete want of them.
func retainNone(t *testing.T, s *Store, want int) {
	t.Helper()
	far := time.Now().Add(time.Hour)
	n, err := s.Cleanup(context.Background(), store.CleanupParams{CompletedBefore: far, CancelledBefore: far, DiscardedBefore: far})
	require.NoError(t, err)
	require.Equal(t, want, n, "retention deletes every job")
}

// TestUniqueKeyGoesWithItsJob: the record of a unique key (B u:<key>, the job that last took it)
// is deleted with that job, however it is deleted. It has no expiry, so with ByArgs fingerprints
// (one key per distinct args) it used to stay forever, one key per unique job ever inserted.
func TestUniqueKeyGoesWithItsJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 20
	unique := func(queue string, i int, states ...store.State) *store.InsertParams {
		p := testJob(queue)
		p.UniqueKey = fmt.Sprintf("fingerprint-%d", i)
		p.UniqueStates = states
		return p
	}
	for _, tc := range []struct {
		name string
		// run inserts and deletes n unique jobs of queue "uq".
		run func(t *testing.T, s *Store)
	}{
		{"retention", func(t *testing.T, s *Store) {
			var ps []*store.InsertParams
			for i := range n {
				// Half hold their key while completed, half give it up: both go by retention.
				if i%2 == 0 {
					ps = append(ps, unique("uq", i, store.StateAvailable, store.StateActive, store.StateCompleted))
				} else {
					ps = append(ps, unique("uq", i))
				}
			}
			_, err := s.Insert(ctx, ps)
			require.NoError(t, err)
			completeAll(t, s, "uq", n)
			retainNone(t, s, n)
		}},
		{"DeleteJob", func(t *testing.T, s *Store) {
			for i := range n {
				p := unique("uq", i)
				_, err := s.Insert(ctx, []*store.InsertParams{p})
				require.NoError(t, err)
				_, err = s.DeleteJob(ctx, p.ID)
				require.NoError(t, err)
			}
		}},
		{"pruning", func(t *testing.T, s *Store) {
			var ps []*store.InsertParams
			for i := range n {
				ps = append(ps, unique("uq", i, store.StateAvailable, store.StateActive, store.StateDiscarded))
			}
			_, err := s.Insert(ctx, ps)
			require.NoError(t, err)
			jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "uq", Limit: n, WorkerID: "w", LeaseDuration: time.Hour})
			require.NoError(t, err)
			var cs []store.Completion
			for _, j := range jobs {
				cs = append(cs, store.Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateDiscarded})
			}
			_, err = s.Finish(ctx, cs)
			require.NoError(t, err)
			m, err := s.PruneDiscarded(ctx, store.PruneParams{Before: time.Now().Add(time.Hour), Limit: 1000})
			require.NoError(t, err)
			require.Equal(t, n, m["uq"])
		}},
		{"removed as it completes", func(t *testing.T, s *Store) {
			var ps []*store.InsertParams
			for i := range n {
				ps = append(ps, unique("uq", i, store.StateAvailable, store.StateActive))
			}
			_, err := s.Insert(ctx, ps)
			require.NoError(t, err)
			jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "uq", Limit: n, WorkerID: "w", LeaseDuration: time.Hour})
			require.NoError(t, err)
			var cs []store.Completion
			for _, j := range jobs {
				cs = append(cs, store.Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateCompleted, Remove: true})
			}
			_, err = s.Finish(ctx, cs)
			require.NoError(t, err)
			_, err = s.GetJob(ctx, jobs[0].ID)
			require.ErrorIs(t, err, store.ErrNotFound, "the completion removed the job")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newTestStore(t)
			tc.run(t, s)
			left := leftNaming(t, s, "fingerprint-")
			require.Emptyf(t, left, "%d records of deleted unique jobs' keys left behind", len(left))
			var refs []store.UniqueKeyRef
			for i := range n {
				refs = append(refs, store.UniqueKeyRef{Queue: "uq", Key: fmt.Sprintf("fingerprint-%d", i)})
			}
			held, err := s.HeldUniqueKeys(ctx, refs)
			require.NoError(t, err)
			require.Empty(t, held, "a deleted job holds no key")
		})
	}
}

// TestUniqueKeyRecordOfReplacedHolder: a holder that gives its key up to an insert (its period ran
// out, or it finished holding the key while completed) leaves no record naming it once it is
// deleted, though the new job did not take the key (it was inserted outside its own states).
func TestUniqueKeyRecordOfReplacedHolder(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	ctx := context.Background()
	first := testJob("uq")
	first.UniqueKey = "fingerprint-lapsing"
	first.UniqueUntil = time.Now().Add(200 * time.Millisecond)
	done := testJob("uq")
	done.UniqueKey = "fingerprint-done"
	done.UniqueStates = []store.State{store.StateAvailable, store.StateActive, store.StateCompleted}
	_, err := s.Insert(ctx, []*store.InsertParams{first, done})
	require.NoError(t, err)
	completeAll(t, s, "uq", 2)
	require.Eventually(t, func() bool { return !time.Now().Before(first.UniqueUntil) }, 5*time.Second, 10*time.Millisecond)
	for _, key := range []string{first.UniqueKey, done.UniqueKey} {
		later := testJob("uq")
		later.UniqueKey = key
		later.OnConflict = store.ConflictReplace
		later.UniqueStates = []store.State{store.StateAvailable}
		later.State, later.ScheduledAt = store.StateScheduled, time.Now().Add(time.Hour)
		_, err := s.Insert(ctx, []*store.InsertParams{later})
		require.NoError(t, err)
		_, err = s.DeleteJob(ctx, later.ID)
		require.NoError(t, err)
	}
	retainNone(t, s, 2)
	require.Empty(t, leftNaming(t, s, "fingerprint-"))
}

// TestRateKeyGoesWithItsJobs: a rate key (one per customer is the usual use) leaves the claim's
// sources (B ks:<kind>) once it has no available job, and its counts (<prefix>rl:<key> when it
// holds no limit) once it has no job at all. Claims read one ready set per registered key, so a
// key kept registered forever made every claim pay for every key ever used.
func TestRateKeyGoesWithItsJobs(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	ctx := context.Background()
	var ps []*store.InsertParams
	for i := range 50 {
		p := testJob("rq")
		p.RateKey = fmt.Sprintf("customer-%d", i)
		ps = append(ps, p)
	}
	// A key with a limit keeps its limit, and only that.
	ps[0].RateLimit = &store.RateLimit{MaxActive: 5}
	_, err := s.Insert(ctx, ps)
	require.NoError(t, err)
	completeAll(t, s, "rq", 50)
	for _, k := range leftNaming(t, s, "customer-") {
		require.NotContains(t, k, "ks:", "a key without available jobs is no claim source")
	}
	retainNone(t, s, 50)
	require.Equal(t, []string{"rl:customer-0", "rlkeys ∋ customer-0"}, leftNaming(t, s, "customer-"))
	infos, err := s.ListRateLimits(ctx)
	require.NoError(t, err)
	require.Len(t, infos, 1)
	require.Equal(t, 5, infos[0].Limit.MaxActive)
	require.Zero(t, infos[0].Active)
	require.Zero(t, infos[0].Waiting)
}

// TestRateKeySourceComesBack: a rate key that left the claim's sources (its ready set ran empty)
// is a source again as soon as it has an available job, whichever way it comes: a retry, a
// scheduled job come due, a job of the same insert batch after an earlier one of the key was
// replaced by it.
func TestRateKeySourceComesBack(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	ctx := context.Background()
	claimOne := func() *store.Job {
		t.Helper()
		jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "rq", Limit: 10, WorkerID: "w", LeaseDuration: time.Hour})
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		return jobs[0]
	}
	p := testJob("rq")
	p.RateKey = "customer"
	later := testJob("rq")
	later.RateKey = "customer"
	later.State, later.ScheduledAt = store.StateScheduled, time.Now().Add(300*time.Millisecond)
	_, err := s.Insert(ctx, []*store.InsertParams{p, later})
	require.NoError(t, err)

	// A loaded machine may let later come due before either claim: each claim takes what is due
	// (Limit 10), and later is looked for once its time has passed if neither took it.
	claimAll := func() map[string]*store.Job {
		t.Helper()
		jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "rq", Limit: 10, WorkerID: "w", LeaseDuration: time.Hour})
		require.NoError(t, err)
		byID := map[string]*store.Job{}
		for _, j := range jobs {
			byID[j.ID] = j
		}
		return byID
	}
	got := claimAll()
	j := got[p.ID]
	require.NotNil(t, j, "the available job")
	laterClaimed := got[later.ID] != nil
	require.Empty(t, leftNaming(t, s, "ks:"), "no available job: the key is no claim source")
	res, err := s.Finish(ctx, []store.Completion{{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateRetryable}})
	require.NoError(t, err)
	require.True(t, res[0].Applied)
	got = claimAll()
	require.NotNil(t, got[p.ID], "retried")
	laterClaimed = laterClaimed || got[later.ID] != nil

	if !laterClaimed {
		require.Eventually(t, func() bool { return !time.Now().Before(later.ScheduledAt) }, 5*time.Second, 10*time.Millisecond)
		require.Equal(t, later.ID, claimOne().ID, "come due")
	}

	// In one batch: the first job of the key files the key as a source, the second replaces it
	// (the key's source empties) and must file it again.
	a, b := testJob("rq"), testJob("rq")
	for _, x := range []*store.InsertParams{a, b} {
		x.RateKey, x.UniqueKey, x.OnConflict = "batch-customer", "batch-key", store.ConflictReplace
	}
	_, err = s.Insert(ctx, []*store.InsertParams{a, b})
	require.NoError(t, err)
	require.Equal(t, b.ID, claimOne().ID, "the job that replaced another of its batch")
}

// TestClaimDropsEmptyRateKeySources: a rate key registered as a claim source with no available
// job (as a store written by an earlier version holds one per key ever used) leaves the sources
// at the queue's next claim.
func TestClaimDropsEmptyRateKeySources(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	ctx := context.Background()
	p := testJob("rq")
	p.RateKey = "live"
	_, err := s.Insert(ctx, []*store.InsertParams{p})
	require.NoError(t, err)
	sources := s.qkey("rq") + "ks:k"
	var stale []any
	for i := range 100 {
		stale = append(stale, fmt.Sprintf("stale-%d", i))
	}
	require.NoError(t, s.rdb.SAdd(ctx, sources, stale...).Err())
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "rq", Limit: 10, WorkerID: "w", LeaseDuration: time.Hour})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Empty(t, leftNaming(t, s, "stale-"))
}

// TestTenantCountsGoWithItsJobs: a tenant's counts (<prefix>tc:<tenant>) and its place in the set
// of tenants go with its last job; GetTenant then says not found, as ListTenants leaves it out.
func TestTenantCountsGoWithItsJobs(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	ctx := context.Background()
	var ps []*store.InsertParams
	for i := range 20 {
		p := testJob("tq")
		p.Tenant = fmt.Sprintf("gone-tenant-%d", i)
		ps = append(ps, p)
	}
	_, err := s.Insert(ctx, ps)
	require.NoError(t, err)
	completeAll(t, s, "tq", 20)
	info, err := s.GetTenant(ctx, "gone-tenant-0")
	require.NoError(t, err)
	require.Equal(t, map[store.State]int64{store.StateCompleted: 1}, info.Counts)
	retainNone(t, s, 20)
	require.Empty(t, leftNaming(t, s, "gone-tenant-"), "before any listing")
	_, err = s.GetTenant(ctx, "gone-tenant-0")
	require.ErrorIs(t, err, store.ErrNotFound)
	infos, err := s.ListTenants(ctx)
	require.NoError(t, err)
	require.Empty(t, infos)
}

// TestClusterKeysGoWithTheirJobs: the same on a Redis Cluster, where a rate key also keeps per
// queue counts (B rn:<key>) and a tenant per queue counts and set (B tc:<tenant>, B tenants).
func TestClusterKeysGoWithTheirJobs(t *testing.T) {
	t.Parallel()
	_, s, queues := migratedCluster(t)
	ctx := context.Background()
	var ps []*store.InsertParams
	for i := range 30 {
		p := testJob(queues[0])
		switch i % 3 {
		case 0:
			p.RateKey = fmt.Sprintf("mark-rate-%d", i)
		case 1:
			p.UniqueKey = fmt.Sprintf("mark-unique-%d", i)
		default:
			p.Tenant = fmt.Sprintf("mark-tenant-%d", i)
		}
		ps = append(ps, p)
	}
	_, err := s.Insert(ctx, ps)
	require.NoError(t, err)
	completeAll(t, s, queues[0], 30)
	retainNone(t, s, 30)
	left := leftNaming(t, s, "mark-")
	require.Emptyf(t, left, "%d keys or members of deleted jobs left behind", len(left))
	var refs []store.UniqueKeyRef
	for _, p := range ps {
		if p.UniqueKey != "" {
			refs = append(refs, store.UniqueKeyRef{Queue: p.Queue, Key: p.UniqueKey})
		}
	}
	held, err := s.HeldUniqueKeys(ctx, refs)
	require.NoError(t, err)
	require.Empty(t, held)
}

// TestHeldUniqueKeysAcrossQueues: on Redis a unique key is held per queue, so the same key asked of
// several queues (slots, on a cluster) names each queue's own holder, in one call.
func TestHeldUniqueKeysAcrossQueues(t *testing.T) {
	t.Parallel()
	_, s, queues := migratedCluster(t)
	ctx := context.Background()
	want := map[store.UniqueKeyRef]string{}
	var refs []store.UniqueKeyRef
	for _, q := range queues[:2] {
		p := testJob(q)
		p.UniqueKey = "shared"
		_, err := s.Insert(ctx, []*store.InsertParams{p})
		require.NoError(t, err)
		want[store.UniqueKeyRef{Queue: q, Key: "shared"}] = p.ID
	}
	for _, q := range queues {
		refs = append(refs, store.UniqueKeyRef{Queue: q, Key: "shared"}, store.UniqueKeyRef{Queue: q, Key: "free"})
	}
	held, err := s.HeldUniqueKeys(ctx, refs)
	require.NoError(t, err)
	require.Equal(t, want, held)
}
