package pronto_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/redistest"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/postgres"
	redisstore "github.com/pronto-jobs/pronto/store/redis"
)

// limitedKeysJob is an available job of kind and rate key in queue q.
func limitedKeysJob(q, kind, key string) *store.InsertParams {
	return &store.InsertParams{ID: uuidv7.New(), Kind: kind, Queue: q, Args: json.RawMessage(`{}`),
		State: store.StateAvailable, MaxAttempts: 3, RateKey: key}
}

// limitedKeysClaim claims p from s and returns what OnLimited heard.
func limitedKeysClaim(t *testing.T, s store.Store, p store.ClaimParams) ([]*store.Job, []store.LimitHit) {
	t.Helper()
	var hits []store.LimitHit
	p.OnLimited = func(h []store.LimitHit) { hits = append(hits, h...) }
	if p.LeaseDuration == 0 {
		p.LeaseDuration = time.Minute
	}
	p.WorkerID = "w"
	jobs, err := s.Claim(context.Background(), p)
	require.NoError(t, err)
	return jobs, hits
}

// TestLimitedKeysOnlyOfClaimQueueAndKinds: ClaimParams.OnLimited names only keys "of the claim's
// queue whose limit has no room for a due job of theirs (of the claim's kinds)". A claim that takes
// the last job of a key in its queue and kinds does not name the key because a job of it waits in
// another queue, or is of a kind the claim does not take.
func TestLimitedKeysOnlyOfClaimQueueAndKinds(t *testing.T) {
	t.Run("redis cluster", func(t *testing.T) {
		t.Parallel()
		rdb := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: redistest.StartCluster(t)})
		t.Cleanup(func() { _ = rdb.Close() })
		s, err := redisstore.New(context.Background(), rdb, redisstore.Options{Prefix: "limitedkeys:" + uuidv7.New() + ":"})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		require.NoError(t, s.Migrate(context.Background()))
		testLimitedKeysOnlyOfClaimQueueAndKinds(t, s)
	})
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		testLimitedKeysOnlyOfClaimQueueAndKinds(t, ts.Store)
	})
}

func testLimitedKeysOnlyOfClaimQueueAndKinds(t *testing.T, s store.Store) {
	ctx := context.Background()
	rl := s.(store.RateLimiter)
	t.Run("other queue", func(t *testing.T) {
		key := "rk-q-" + uuidv7.New()
		require.NoError(t, rl.SetRateLimit(ctx, key, store.RateLimit{MaxActive: 1}))
		qa, qb := "qa-"+uuidv7.New(), "qb-"+uuidv7.New()
		_, err := s.Insert(ctx, []*store.InsertParams{limitedKeysJob(qa, "k", key), limitedKeysJob(qb, "k", key)})
		require.NoError(t, err)
		jobs, hits := limitedKeysClaim(t, s, store.ClaimParams{Queue: qa, Limit: 10})
		require.Len(t, jobs, 1)
		require.Empty(t, hits, "no job of the key is left in the claim's queue")
	})
	t.Run("other kind", func(t *testing.T) {
		key := "rk-k-" + uuidv7.New()
		require.NoError(t, rl.SetRateLimit(ctx, key, store.RateLimit{MaxActive: 1}))
		q := "qk-" + uuidv7.New()
		_, err := s.Insert(ctx, []*store.InsertParams{limitedKeysJob(q, "a", key), limitedKeysJob(q, "b", key)})
		require.NoError(t, err)
		jobs, hits := limitedKeysClaim(t, s, store.ClaimParams{Queue: q, Kinds: []string{"a"}, Limit: 10})
		require.Len(t, jobs, 1)
		require.Empty(t, hits, "no job of the key of the claim's kinds is left")
	})
	t.Run("same queue and kind", func(t *testing.T) {
		// The control: a job of the key left in the claim's queue and kinds is named.
		key := "rk-s-" + uuidv7.New()
		require.NoError(t, rl.SetRateLimit(ctx, key, store.RateLimit{MaxActive: 1}))
		q := "qs-" + uuidv7.New()
		_, err := s.Insert(ctx, []*store.InsertParams{limitedKeysJob(q, "a", key), limitedKeysJob(q, "a", key)})
		require.NoError(t, err)
		jobs, hits := limitedKeysClaim(t, s, store.ClaimParams{Queue: q, Kinds: []string{"a"}, Limit: 10})
		require.Len(t, jobs, 1)
		require.Len(t, hits, 1)
		require.Equal(t, key, hits[0].Key)
		require.False(t, hits[0].HasRoom)
	})
}

// TestRateLimitEpisodeNotOpenedByOtherQueue: an OJS worker fetches queue "a", whose only job of key
// K it takes; a job of K waits in queue "b", which nobody fetches here. No job of K waits where the
// claim looked, so no rate_limit.exceeded: an episode opened then could end only once queue b's
// backlog is gone, whichever process works it.
func TestRateLimitEpisodeNotOpenedByOtherQueue(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c, err := pronto.NewClient(ts.Store, nil)
		require.NoError(t, err)
		key := "ep-" + uuidv7.New()
		require.NoError(t, c.RateLimitSet(ctx, key, pronto.RateLimit{MaxActive: 1}))
		for _, q := range []string{"a", "b"} {
			_, err := c.Insert(ctx, rateEpisodeArgs{}, &pronto.InsertOpts{RateKey: key, Queue: q})
			require.NoError(t, err)
		}
		events, unsubscribe := c.Subscribe(pronto.EventRateLimitExceeded, pronto.EventRateLimitReleased)
		defer unsubscribe()
		got, err := c.RemoteFetch(ctx, pronto.RemoteFetchParams{Queues: []string{"a"}, Limit: 10, WorkerID: "w"})
		require.NoError(t, err)
		require.Len(t, got, 1)
		select {
		case ev := <-events:
			t.Fatalf("no job of %s waits in queue a, yet %s %+v", key, ev.Kind, *ev.Limit)
		default: // the events of a claim are emitted before RemoteFetch returns
		}
	})
}

// limitedKeysPGSchema opens a migrated PostgreSQL store in a fresh schema; with before024 the claim
// function is put back as migration 023 left it (024's down file), to compare.
func limitedKeysPGSchema(t testing.TB, pool *pgxpool.Pool, before024 bool) (*postgres.Store, string) {
	t.Helper()
	ctx := context.Background()
	schema := testdb.Schema(t)
	s, err := postgres.New(pool, postgres.Config{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.NoError(t, s.Migrate(ctx))
	if before024 {
		down, err := os.ReadFile("store/postgres/migrations/024_rate_limited_keys.down.sql")
		require.NoError(t, err)
		_, err = pool.Exec(ctx, strings.ReplaceAll(string(down), "{schema}", pgx.Identifier{schema}.Sanitize()))
		require.NoError(t, err)
	}
	return s, schema
}

// limitedKeysFill inserts n available jobs of rate key key into queue q.
func limitedKeysFill(t testing.TB, s store.Store, q, key string, n int) {
	t.Helper()
	ctx := context.Background()
	for done := 0; done < n; {
		var ps []*store.InsertParams
		for i := 0; i < 500 && done < n; i++ {
			ps = append(ps, limitedKeysJob(q, "k", key))
			done++
		}
		_, err := s.Insert(ctx, ps)
		require.NoError(t, err)
	}
}

// limitedKeysClaimCall runs one claim_limited_held call of queue q, with pronto.want_limited set to
// want, in a transaction rolled back, and returns the shared buffers it touched (EXPLAIN ANALYZE
// BUFFERS, the function's statements included) and the pronto.rate_limited it left.
func limitedKeysClaimCall(t *testing.T, pool *pgxpool.Pool, schema, want string) (int64, string) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, "SELECT set_config('pronto.want_limited', $1, true)", want)
	require.NoError(t, err)
	var plan []map[string]any
	require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT count(*) FROM "+
		pgx.Identifier{schema}.Sanitize()+".claim_limited_held('q', NULL, 10, 30000000, 'w')").Scan(&plan))
	var limited *string
	require.NoError(t, tx.QueryRow(ctx, "SELECT current_setting('pronto.rate_limited', true)").Scan(&limited))
	top := plan[0]["Plan"].(map[string]any)
	out := ""
	if limited != nil {
		out = *limited
	}
	return int64(top["Shared Hit Blocks"].(float64) + top["Shared Read Blocks"].(float64)), out
}

// TestPostgresLimitedKeysOnlyWhenAsked: PostgreSQL's claim works out the keys it leaves limited
// (for ClaimParams.OnLimited) only when the claim's transaction asks (pronto.want_limited, set by
// the Go claim when OnLimited is set). A claim nobody listens to, the default, does the work of
// migration 023's claim: on the same data (a key full, 3000 active and 100 waiting; or MaxActive
// 10 with 50 waiting), it touches no more buffers, give or take a few (the least of several
// calls), and leaves no limited keys; asked, it names the full key. Since migration 034 it touches
// far fewer (17 against 139, 15 against 71; 90 against 202 and 22 against 71 with another session's
// snapshot open), as the full key's waiting jobs are held out of the claim index. It holds with
// another session's snapshot open throughout (checked by hand: as CI's other tests leave them).
func TestPostgresLimitedKeysOnlyWhenAsked(t *testing.T) {
	ctx := context.Background()
	pool := testdb.NewPool(t, 2)
	for _, sc := range []struct {
		name                       string
		maxActive, active, backlog int
	}{{"wide key full", 3000, 3000, 3100}, {"small key full", 10, 10, 60}} {
		t.Run(sc.name, func(t *testing.T) {
			setup := func(before024 bool) string {
				s, schema := limitedKeysPGSchema(t, pool, before024)
				require.NoError(t, s.SetRateLimit(ctx, "K", store.RateLimit{MaxActive: sc.maxActive}))
				// The key's running jobs are written as active, not claimed: a claim leaves in the
				// claimable jobs' indexes the entries of the row versions it replaced, which a vacuum
				// cannot remove while another session's snapshot predates them (other tests, in CI),
				// and the claims walk over the front of those indexes more than once (a priority
				// probe, then the range), so such entries would weigh on the two claims unequally.
				_, err := pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "jobs"}.Sanitize()+`
					(id, kind, queue, args, state, created_at, scheduled_at, rate_key, attempt, started_at,
						lease_expires_at, worker_id)
					SELECT gen_random_uuid(), 'k', 'q', '[]', 'active', now(), now(), 'K', 1, now(),
						now() + interval '1 hour', 'w'
					FROM generate_series(1, $1::int)`, sc.active)
				require.NoError(t, err)
				limitedKeysFill(t, s, "q", "K", sc.backlog-sc.active)
				return schema
			}
			old, cur := setup(true), setup(false)
			// Since migration 034 the first claim that finds the key full holds its waiting jobs out
			// of the claim index, once; the calls below roll back, so they would each hold them again.
			// One committed claim first, so that they compare the claims as they run from then on.
			_, err := pool.Exec(ctx, "SELECT count(*) FROM "+pgx.Identifier{cur}.Sanitize()+
				".claim_limited_held('q', NULL, 10, 30000000, 'w')")
			require.NoError(t, err)
			// Both schemas in the same state, so that the comparison is of the claims alone: an
			// autovacuum or auto-analyze reaching one schema's fresh tables and not the other's
			// changes its plans and the buffers they touch (seen on a loaded machine).
			for _, schema := range []string{old, cur} {
				rows, err := pool.Query(ctx, "SELECT tablename FROM pg_tables WHERE schemaname = $1", schema)
				require.NoError(t, err)
				tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
				require.NoError(t, err)
				for _, table := range tables {
					_, err := pool.Exec(ctx, "VACUUM ANALYZE "+pgx.Identifier{schema, table}.Sanitize())
					require.NoError(t, err)
				}
			}
			least := func(schema, want string) (int64, string) {
				n, limited := int64(-1), ""
				for i := 0; i < 6; i++ {
					b, l := limitedKeysClaimCall(t, pool, schema, want)
					if i >= 2 && (n < 0 || b < n) {
						n = b
					}
					limited = l
				}
				return n, limited
			}
			bOld, _ := least(old, "off")
			bCur, limited := least(cur, "off")
			t.Logf("buffers per claim that finds the key full, nobody listening: migration 023 %d, now %d", bOld, bCur)
			require.Empty(t, limited, "a claim nobody asked the limited keys of works them out")
			require.LessOrEqual(t, bCur, bOld+3, "a claim nobody asked the limited keys of does more work than before migration 024")

			_, limited = least(cur, "on")
			require.Contains(t, limited, `"K"`, "asked, the claim names the full key")
		})
	}
}
