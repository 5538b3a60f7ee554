package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/pronto-jobs/pronto/store"
)

// Fair scheduling across tenants (see store.Store's Claim contract and docs/fair-scheduling.md). A
// queue holding claimable jobs with a tenant (and none with a rate key, which go to claimLimited) is
// claimed in turns: each tenant with claimable jobs, in tenant order after the queue's cursor, then
// the jobs without a tenant, then round again, each turn taking one job, the tenant's first in claim
// order. Every step is a seek of pronto_jobs_tenant, so a claim costs in proportion to the jobs it
// takes, however many tenants the queue has.

// tenantInQueueSQL is true when the queue given by placeholder queue holds a claimable job with a
// tenant and no rate key: one seek of pronto_jobs_tenant, empty without tenants.
func tenantInQueueSQL(queue string) string {
	return `EXISTS (SELECT 1 FROM pronto_jobs AS t
		WHERE t.queue = ` + queue + ` AND t.tenant IS NOT NULL AND t.rate_key IS NULL AND t.held IS NULL
			AND t.state IN ('available', 'scheduled', 'retryable'))`
}

// fairCond is the condition of a job a fair turn may take: queue ?2 at ?1.
const fairCond = `queue = ?2 AND state IN ('available', 'scheduled', 'retryable')
		AND scheduled_at <= ?1
		AND (expires_at IS NULL OR expires_at > ?1) AND held IS NULL`

// fairSQL holds the statements of a fair claim for a kinds filter of n kinds (?4...); ?(4+n) is a
// count of jobs.
type fairSQL struct {
	next, best, untenanted string
}

func newFairSQL(n int) fairSQL {
	kinds := kindsFilter(n, 4)
	limit := fmt.Sprintf("?%d", 4+n)
	return fairSQL{
		// The first tenant after ?3 ('' for the first of all) with a claimable job, due or not (one
		// seek): nextTenant asks best whether it has one due, rather than this statement passing
		// over every entry of a tenant whose jobs are all due later.
		next: `SELECT tenant FROM pronto_jobs INDEXED BY pronto_jobs_tenant
			WHERE queue = ?2 AND ` + fairIndexCond + ` AND tenant > ?3
			ORDER BY tenant LIMIT 1`,
		// Tenant ?3's first claimable jobs, walking its priorities as claimSQL walks a queue's: a
		// tenant's jobs due later follow its due ones of each priority in the index, and one scan
		// in claim order would pass over all of them whenever the tenant has fewer due jobs than
		// the turn wants.
		best: `WITH RECURSIVE prios(p) AS (
				SELECT (SELECT max(priority) FROM pronto_jobs INDEXED BY pronto_jobs_tenant
					WHERE queue = ?2 AND tenant = ?3 AND ` + fairIndexCond + `)
				UNION ALL
				SELECT (SELECT max(priority) FROM pronto_jobs INDEXED BY pronto_jobs_tenant
					WHERE queue = ?2 AND tenant = ?3 AND ` + fairIndexCond + ` AND priority < prios.p)
				FROM prios WHERE prios.p IS NOT NULL)
			SELECT pronto_jobs.id FROM prios CROSS JOIN pronto_jobs INDEXED BY pronto_jobs_tenant
			WHERE prios.p IS NOT NULL AND priority = prios.p AND ` + fairCond + ` AND tenant = ?3 AND rate_key IS NULL ` + kinds + `
			LIMIT ` + limit,
		// The first claimable jobs without a tenant, looked for among the queue's first 64 claimable
		// jobs in plain claim order (the walk of claimSQL): finding them beyond would mean reading the
		// tenants' backlogs. (?3 is unused: the kinds keep their places.) claimableStatesSQL,
		// redundant with fairCond, lets it read pronto_jobs_claim, whose condition spells the states
		// that way.
		untenanted: `WITH RECURSIVE prios(p) AS (
				SELECT (SELECT max(priority) FROM pronto_jobs INDEXED BY pronto_jobs_claim
					WHERE queue = ?2 AND ` + claimableStatesSQL + ` AND held IS NULL)
				UNION ALL
				SELECT (SELECT max(priority) FROM pronto_jobs INDEXED BY pronto_jobs_claim
					WHERE queue = ?2 AND ` + claimableStatesSQL + ` AND held IS NULL AND priority < prios.p)
				FROM prios WHERE prios.p IS NOT NULL)
			SELECT id FROM (
				SELECT pronto_jobs.id, tenant, rate_key, priority, scheduled_at FROM prios CROSS JOIN pronto_jobs
				WHERE prios.p IS NOT NULL AND priority = prios.p
					AND ` + fairCond + ` AND ` + claimableStatesSQL + ` AND coalesce(?3, '') = coalesce(?3, '') ` + kinds + `
				LIMIT 64)
			WHERE tenant IS NULL AND rate_key IS NULL
			ORDER BY priority DESC, scheduled_at, id LIMIT ` + limit,
	}
}

// fairIndexCond is pronto_jobs_tenant's condition beyond the tenant, spelt as the index spells it
// so that SQLite uses the index for the walk's seeks of a tenant's priorities.
const fairIndexCond = `tenant IS NOT NULL AND rate_key IS NULL AND held IS NULL
					AND state IN ('available', 'scheduled', 'retryable')`

const (
	fairPausedSQL    = `SELECT EXISTS (SELECT 1 FROM pronto_queues WHERE name = ?1 AND paused = 1)`
	fairCursorSQL    = `SELECT tenant, used FROM pronto_tenant_cursors WHERE queue = ?1`
	fairSetCursorSQL = `INSERT INTO pronto_tenant_cursors (queue, tenant, used) VALUES (?1, ?2, ?3)
		ON CONFLICT (queue) DO UPDATE SET tenant = excluded.tenant, used = excluded.used`
	fairWeightSQL = `SELECT weight FROM pronto_tenants WHERE tenant = ?1`
	// fairLimitSQL reads the limit stored under a tenant's limit key ?1, if it bounds anything.
	fairLimitSQL = `SELECT max_active, rate, period_us, window_start, window_count FROM pronto_rate_limits
		WHERE key = ?1 AND (max_active > 0 OR (rate > 0 AND period_us > 0))`
	// fairActiveSQL counts tenant ?1's active jobs across queues (pronto_jobs_tenant_state).
	fairActiveSQL = `SELECT count(*) FROM pronto_jobs WHERE tenant = ?1 AND state = 'active'`
)

// fairClaimSQL makes the jobs whose ids are in the JSON array ?4 active for worker ?3 at ?1 with a
// lease until ?2: one statement per turn, not one per job (a turn of a tenant alone takes a whole
// claim's jobs).
var fairClaimSQL = `UPDATE pronto_jobs SET state = 'active', attempt = attempt + 1, started_at = ?1,
		lease_expires_at = ?2, worker_id = ?3, claim_token = ` + newClaimToken + `,
		` + uniqueKeyAfter(`'active'`, "", "?1") + `
	WHERE id IN (SELECT value FROM json_each(?4))
	RETURNING ` + jobColumns

// fairPart is one participant of a fair claim: a tenant, or the jobs without one.
type fairPart struct {
	tenant string // "": the jobs without a tenant
	weight int
	limit  *keyLimit // nil: no limit
	alive  bool
}

// claimFair claims up to p.Limit jobs of p.Queue in turns across its tenants, in one transaction,
// and returns them in the order of the turns. It follows claim_fair_pick of the PostgreSQL store
// (migration 011): a walk from the queue's cursor collects the participants that come next (at most
// p.Limit + 1, one seek each, passing over tenants at their limit), then each participant takes its
// weight times max(1, wanted / total weight) jobs per step in one seek, leaving when it comes up
// short; jobs are ranked by round and place, and the cursor moves to the last-ranked participant.
func (s *Store) claimFair(ctx context.Context, p store.ClaimParams) ([]*store.Job, error) {
	q := newFairSQL(len(p.Kinds))
	r, err := s.begin(ctx, fairPausedSQL, fairCursorSQL, fairSetCursorSQL, fairClaimSQL, fairWeightSQL,
		fairLimitSQL, fairActiveSQL, setWindowSQL)
	if err != nil {
		return nil, err
	}
	defer r.tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	var paused bool
	if err := r.tx.QueryRowContext(ctx, fairPausedSQL, p.Queue).Scan(&paused); err != nil || paused {
		return nil, err
	}
	var cur sql.NullString // the participant served last; NULL: the jobs without a tenant
	var curUsed int
	if err := r.tx.QueryRowContext(ctx, fairCursorSQL, p.Queue).Scan(&cur, &curUsed); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	nowUS, _ := s.nowMicro()
	args := make([]any, 3, 4+len(p.Kinds))
	args[0], args[1] = nowUS, p.Queue
	for _, k := range p.Kinds {
		args = append(args, k)
	}
	args = append(args, 0)
	limitArg := len(args) - 1

	weight := func(tenant string) (int, error) {
		var w int
		err := r.QueryRowContext(ctx, fairWeightSQL, tenant).Scan(&w)
		if errors.Is(err, sql.ErrNoRows) {
			return store.DefaultTenantWeight, nil
		}
		return w, err
	}
	limit := func(tenant string) (*keyLimit, error) {
		k := &keyLimit{}
		err := r.QueryRowContext(ctx, fairLimitSQL, store.TenantLimitKey(tenant)).Scan(&k.maxActive, &k.rate,
			&k.periodUS, &k.windowStart, &k.windowCount)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if k.maxActive > 0 {
			if err := r.QueryRowContext(ctx, fairActiveSQL, tenant).Scan(&k.active); err != nil {
				return nil, err
			}
		}
		return k, nil
	}

	// nextTenant returns the first tenant after after with a job a turn may take now ("" for none):
	// the next tenant with a claimable job, then whether it has one due (best's walk of its
	// priorities, for one job), and so on past those whose jobs are all due later.
	nextTenant := func(after string) (string, error) {
		for {
			var next string
			err := r.tx.QueryRowContext(ctx, q.next, args[0], args[1], after).Scan(&next)
			if errors.Is(err, sql.ErrNoRows) {
				return "", nil
			}
			if err != nil {
				return "", err
			}
			probe := slices.Clone(args)
			probe[2], probe[limitArg] = next, 1
			var id string
			err = r.tx.QueryRowContext(ctx, q.best, probe...).Scan(&id)
			if err == nil {
				return next, nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return "", err
			}
			after = next
		}
	}

	// 1. The walk.
	var parts []*fairPart
	going := false // the cursor's tenant continues its turn
	after := cur.String
	if cur.Valid {
		w, err := weight(cur.String)
		if err != nil {
			return nil, fmt.Errorf("tenant weight: %w", err)
		}
		going = curUsed < w
	}
	// resumed: the walk has looked at the cursor's tenant, whose turn goes on. It does so once: at
	// its limit, the tenant is passed over like any other (the walk goes on after it), and its turn
	// stays where it was unless another participant takes one.
	// goingFirst: it takes part, first, so its jobs of this claim count on from curUsed.
	resumed, goingFirst := false, false
	untenanted := false
	for len(parts) <= p.Limit {
		var next string
		fromCursor := going && !resumed
		if fromCursor {
			next, resumed = cur.String, true
		} else {
			var err error
			if next, err = nextTenant(after); err != nil {
				return nil, fmt.Errorf("next tenant: %w", err)
			}
		}
		if next == "" {
			if untenanted {
				break
			}
			parts = append(parts, &fairPart{weight: 1, alive: true})
			untenanted, after = true, ""
			if !cur.Valid {
				break // the jobs without a tenant were served last: their turn closes the walk
			}
			continue
		}
		if untenanted && cur.Valid && (next > cur.String || (next == cur.String && going)) {
			break // past the cursor again: the walk is round
		}
		after = next
		w, err := weight(next)
		if err != nil {
			return nil, fmt.Errorf("tenant weight: %w", err)
		}
		k, err := limit(next)
		if err != nil {
			return nil, fmt.Errorf("tenant limit: %w", err)
		}
		if k == nil || k.room(nowUS) > 0 {
			goingFirst = goingFirst || fromCursor
			parts = append(parts, &fairPart{tenant: next, weight: w, limit: k, alive: true})
		}
		if untenanted && next == cur.String {
			break // the cursor's tenant starts a new turn: the walk is round
		}
	}

	// 2. The rounds.
	type ranked struct {
		rank int64
		job  *store.Job
	}
	var out []ranked
	remaining, base := p.Limit, 0
	bestRank, lastPart, lastUsed := int64(-1), -1, 0
	n := int64(len(parts))
	for remaining > 0 {
		total := 0
		for _, pt := range parts {
			if pt.alive {
				total += pt.weight
			}
		}
		if total == 0 {
			break
		}
		m := max(1, remaining/total)
		for i, pt := range parts {
			if remaining <= 0 {
				break
			}
			if !pt.alive {
				continue
			}
			off := 0
			if i == 0 && base == 0 && goingFirst {
				off = curUsed
			}
			want := min(m*pt.weight-off, remaining)
			if pt.limit != nil {
				want = int(min(int64(want), pt.limit.room(nowUS)))
			}
			query := q.best
			if pt.tenant == "" {
				query = q.untenanted
			}
			args[2], args[limitArg] = pt.tenant, want
			ids, err := queryIDs(ctx, r.tx, query, args)
			if err != nil {
				return nil, fmt.Errorf("fair turn: %w", err)
			}
			claimed := map[string]*store.Job{}
			if len(ids) > 0 {
				b, err := json.Marshal(ids)
				if err != nil {
					return nil, err
				}
				jobs, err := retryLapsed(ctx, r, nowUS, func() ([]*store.Job, error) {
					rows, err := r.QueryContext(ctx, fairClaimSQL, nowUS, nowUS+p.LeaseDuration.Microseconds(), p.WorkerID, string(b))
					if err != nil {
						return nil, err
					}
					return scanJobs(rows, len(ids))
				})
				if err != nil {
					return nil, err
				}
				for _, j := range jobs {
					claimed[j.ID] = j
				}
			}
			for k, id := range ids {
				rnd := base + (k+off)/pt.weight
				rank := int64(rnd)*(n+1) + int64(i)
				if j := claimed[id]; j != nil {
					out = append(out, ranked{rank, j})
				}
				if rank >= bestRank {
					bestRank, lastPart, lastUsed = rank, i, (k+off)%pt.weight+1
				}
				if pt.limit != nil {
					pt.limit.take(nowUS)
				}
			}
			remaining -= len(ids)
			if len(ids) < want || (pt.limit != nil && pt.limit.room(nowUS) <= 0) {
				pt.alive = false
			}
		}
		base += m
	}
	for _, pt := range parts {
		if pt.limit != nil && pt.limit.windowMoved {
			if _, err := r.ExecContext(ctx, setWindowSQL, store.TenantLimitKey(pt.tenant), pt.limit.windowStart.Int64, pt.limit.windowCount); err != nil {
				return nil, fmt.Errorf("record rate window of tenant %s: %w", pt.tenant, err)
			}
		}
	}

	// 3. The cursor.
	if lastPart >= 0 {
		last := sql.NullString{String: parts[lastPart].tenant, Valid: parts[lastPart].tenant != ""}
		if _, err := r.ExecContext(ctx, fairSetCursorSQL, p.Queue, last, lastUsed); err != nil {
			return nil, err
		}
	}
	if err := r.tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	slices.SortStableFunc(out, func(a, b ranked) int { return cmp.Compare(a.rank, b.rank) })
	jobs := make([]*store.Job, len(out))
	for i, o := range out {
		jobs[i] = o.job
	}
	return jobs, nil
}

// queryIDs returns the ids query selects.
func queryIDs(ctx context.Context, tx *sql.Tx, query string, args []any) ([]string, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
