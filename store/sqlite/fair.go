package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

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

// queueTenantSQL asks tenantInQueueSQL of queue ?1; Claim asks it only when its statement claimed
// nothing and the queue has no claimable job with a rate key.
var queueTenantSQL = `SELECT ` + tenantInQueueSQL("?1")

// fairCond is the condition of a job a fair turn may take: queue ?2 at ?1.
const fairCond = `queue = ?2 AND state IN ('available', 'scheduled', 'retryable')
		AND (state = 'available' OR scheduled_at <= ?1)
		AND (expires_at IS NULL OR expires_at > ?1) AND held IS NULL`

// fairSQL holds the statements of a fair claim for a kinds filter of n kinds (?4...).
type fairSQL struct {
	next, best, untenanted string
}

func newFairSQL(n int) fairSQL {
	kinds := kindsFilter(n, 4)
	return fairSQL{
		// The first tenant after ?3 ('' for the first of all) with a claimable job.
		next: `SELECT tenant FROM pronto_jobs INDEXED BY pronto_jobs_tenant
			WHERE ` + fairCond + ` AND tenant IS NOT NULL AND rate_key IS NULL AND tenant > ?3 ` + kinds + `
			ORDER BY tenant LIMIT 1`,
		// Tenant ?3's first claimable job.
		best: `SELECT id FROM pronto_jobs INDEXED BY pronto_jobs_tenant
			WHERE ` + fairCond + ` AND tenant = ?3 AND rate_key IS NULL ` + kinds + `
			ORDER BY priority DESC, scheduled_at, id LIMIT 1`,
		// The first claimable job without a tenant, looked for among the queue's first 64 claimable
		// jobs in plain claim order: finding it beyond them would mean reading the tenants' backlogs.
		// (?3 is unused: the kinds keep their places.)
		untenanted: `SELECT id FROM (
				SELECT id, tenant, rate_key, priority, scheduled_at FROM pronto_jobs
				WHERE ` + fairCond + ` AND coalesce(?3, '') = coalesce(?3, '') ` + kinds + `
				ORDER BY priority DESC, scheduled_at, id LIMIT 64)
			WHERE tenant IS NULL AND rate_key IS NULL
			ORDER BY priority DESC, scheduled_at, id LIMIT 1`,
	}
}

const (
	fairPausedSQL    = `SELECT EXISTS (SELECT 1 FROM pronto_queues WHERE name = ?1 AND paused = 1)`
	fairCursorSQL    = `SELECT tenant FROM pronto_tenant_cursors WHERE queue = ?1`
	fairSetCursorSQL = `INSERT INTO pronto_tenant_cursors (queue, tenant) VALUES (?1, ?2)
		ON CONFLICT (queue) DO UPDATE SET tenant = excluded.tenant`
)

// fairClaimOneSQL makes job ?4 active for worker ?3 at ?1 with a lease until ?2.
var fairClaimOneSQL = `UPDATE pronto_jobs SET state = 'active', attempt = attempt + 1, started_at = ?1,
		lease_expires_at = ?2, worker_id = ?3, claim_token = ` + newClaimToken + `,
		` + uniqueKeyAfter(`'active'`, "") + `
	WHERE id = ?4
	RETURNING ` + jobColumns

// claimFair claims up to p.Limit jobs of p.Queue in turns across its tenants, in one transaction,
// and returns them in the order of the turns.
func (s *Store) claimFair(ctx context.Context, p store.ClaimParams) ([]*store.Job, error) {
	q := newFairSQL(len(p.Kinds))
	r, err := s.begin(ctx, fairPausedSQL, fairCursorSQL, fairSetCursorSQL, fairClaimOneSQL)
	if err != nil {
		return nil, err
	}
	defer r.tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	var paused bool
	if err := r.tx.QueryRowContext(ctx, fairPausedSQL, p.Queue).Scan(&paused); err != nil || paused {
		return nil, err
	}
	var cur sql.NullString // the participant served last; NULL: the jobs without a tenant
	if err := r.tx.QueryRowContext(ctx, fairCursorSQL, p.Queue).Scan(&cur); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	nowUS, _ := s.nowMicro()
	args := make([]any, 3, 3+len(p.Kinds))
	args[0], args[1] = nowUS, p.Queue
	for _, k := range p.Kinds {
		args = append(args, k)
	}
	one := func(query string, v any) (bool, error) {
		err := r.tx.QueryRowContext(ctx, query, args...).Scan(v)
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		return err == nil, err
	}
	var jobs []*store.Job
	took, idle := false, 0 // idle: rounds in a row that took nothing
	for len(jobs) < p.Limit && idle < 2 {
		args[2] = cur.String
		var next, id string
		found, err := one(q.next, &next)
		if err != nil {
			return nil, fmt.Errorf("next tenant: %w", err)
		}
		var got bool
		if found {
			cur = sql.NullString{String: next, Valid: true}
			args[2] = next
			got, err = one(q.best, &id)
		} else {
			// The turn of the jobs without a tenant, which closes the round.
			cur = sql.NullString{}
			got, err = one(q.untenanted, &id)
		}
		if err != nil {
			return nil, fmt.Errorf("fair turn: %w", err)
		}
		if got {
			rows, err := r.QueryContext(ctx, fairClaimOneSQL, nowUS, nowUS+p.LeaseDuration.Microseconds(), p.WorkerID, id)
			if err != nil {
				return nil, err
			}
			claimed, err := scanJobs(rows, 1)
			if err != nil {
				return nil, err
			}
			jobs = append(jobs, claimed...)
			took = true
		}
		if !found {
			if took {
				idle = 0
			} else {
				idle++
			}
			took = false
		}
	}
	if _, err := r.ExecContext(ctx, fairSetCursorSQL, p.Queue, cur); err != nil {
		return nil, err
	}
	if err := r.tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	return jobs, nil
}
