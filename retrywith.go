package pronto

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/pronto-jobs/pronto/internal/metatenant"
	"github.com/pronto-jobs/pronto/store"
)

// RetryOverride is what JobRetryWith changes in the job it retries (ojs-dead-letter.md 6.3). A zero
// field keeps the job's own value.
type RetryOverride struct {
	// Args, when not nil, replaces the job's args (a JSON array).
	Args json.RawMessage
	// Queue, when not empty, moves the job to that queue.
	Queue string
	// Meta, when not nil, is a JSON object whose keys are set over the job's meta (the others kept).
	// Its tenant_id, the job's tenant over OJS, may only repeat the job's Tenant: a retry does not
	// move a job to another tenant.
	Meta json.RawMessage
	// Priority, when not nil, replaces the job's priority. It is a base priority, which the job's
	// tenant's boost (TenantSetPriorityBoost) raises as it does an insert's; without it the job
	// keeps the priority it had, boost included, not boosted again.
	Priority *int
	// MaxAttempts, when positive, replaces the job's attempt budget.
	MaxAttempts int
}

// JobRetryWith retries a discarded or cancelled job with changes (ojs-dead-letter.md 6.3): it inserts
// a new job, available now, that is the old one (kind, args, meta, queue, priority, attempts,
// retry policy, timeout, tags, tenant, rate key, and a future expiry) with o applied, then deletes
// the old one. The new job has a new id (meta.retried_from names the old one) and no unique key: a
// retry is not a new submission. Workflow jobs cannot be retried this way (their place in the
// workflow is their id): use JobRetry. If the delete fails after the insert, the error says so and
// the new job is returned with it; delete the old one by hand. Other states give an error matching
// ErrInvalidTransition.
func (c *Client) JobRetryWith(ctx context.Context, id string, o RetryOverride) (*JobRow, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if err := c.haltRefusal(ctx, fmt.Sprintf("retry with changes of job %s", id)); err != nil {
		return nil, err
	}
	old, err := c.store.GetJob(ctx, id)
	if err != nil {
		return nil, wrapOp(fmt.Sprintf("retry job %s", id), err)
	}
	if old.State != StateDiscarded && old.State != StateCancelled {
		return nil, fmt.Errorf("pronto: retry job %s: it is %s, not discarded or cancelled: %w", id, old.State, store.ErrInvalidTransition)
	}
	if old.WorkflowID != "" {
		return nil, invalidf("retry job %s with changes: it belongs to workflow %s (retry it unchanged)", id, old.WorkflowID)
	}
	args := old.Args
	if o.Args != nil {
		args = o.Args
	}
	if err := checkMetaTenant(o.Meta, old.Tenant, id); err != nil {
		return nil, err
	}
	meta, err := mergeMeta(old.Meta, o.Meta, id)
	if err != nil {
		return nil, err
	}
	opts := InsertOpts{Queue: old.Queue, Priority: old.Priority, MaxAttempts: old.MaxAttempts, Timeout: old.Timeout,
		Tags: old.Tags, Tenant: old.Tenant, RateKey: old.RateKey}
	if o.Queue != "" {
		opts.Queue = o.Queue
	}
	if o.Priority != nil {
		opts.Priority = *o.Priority
	}
	if o.MaxAttempts < 0 {
		return nil, invalidf("retry job %s: max_attempts must be positive", id)
	}
	if o.MaxAttempts > 0 {
		opts.MaxAttempts = o.MaxAttempts
	}
	if len(old.RetryPolicy) > 0 && string(old.RetryPolicy) != "null" {
		var p RetryPolicy
		if err := json.Unmarshal(old.RetryPolicy, &p); err == nil {
			if o.MaxAttempts > 0 {
				p.MaxAttempts = o.MaxAttempts // the policy shows the new budget too
			}
			opts.RetryPolicy = &p
		}
	}
	if old.ExpiresAt.After(time.Now()) {
		opts.ExpiresAt = old.ExpiresAt
	}
	p, err := c.resolveOJS(OJSJob{Kind: old.Kind, Args: args, Meta: meta, Opts: opts})
	if err != nil {
		return nil, err
	}
	// The old priority already holds the tenant's boost, added when the job was first inserted: a
	// retry keeps it (boosting it again would raise it on every retry). A priority given in o is the
	// caller's base priority, boosted once as any insert's is.
	rows, err := c.insertBoosting(ctx, []*store.InsertParams{p}, c.storeInsert, o.Priority != nil)
	if err != nil {
		return nil, err
	}
	j := rows[0]
	if _, err := c.store.DeleteJob(ctx, id); err != nil {
		return j, fmt.Errorf("pronto: job %s was retried as job %s, but deleting it failed (delete it by hand): %w", id, j.ID, err)
	}
	c.events.emit(&Event{Kind: EventRetried, Job: j, At: time.Now(), From: old.State})
	return j, nil
}

// checkMetaTenant refuses an override meta whose tenant_id names another tenant than the job's: the
// job would show one tenant and be stored, limited and scheduled as another's.
func checkMetaTenant(over json.RawMessage, tenant, id string) error {
	if raw, bad := metatenant.Mismatch(over, tenant); bad {
		return invalidf("retry job %s: meta.tenant_id %s: a retry keeps the job's tenant %q", id, raw, tenant)
	}
	return nil
}

// mergeMeta sets the keys of over (a JSON object, or nil) over base's and adds retried_from.
func mergeMeta(base, over json.RawMessage, from string) (json.RawMessage, error) {
	m := map[string]json.RawMessage{}
	if len(base) > 0 && string(base) != "null" {
		if err := json.Unmarshal(base, &m); err != nil {
			return nil, fmt.Errorf("pronto: retry job %s: its meta does not decode: %w", from, err)
		}
	}
	if over != nil {
		if !jsonStartsWith(over, '{') {
			return nil, invalidf("retry job %s: meta must be a JSON object", from)
		}
		var o map[string]json.RawMessage
		if err := json.Unmarshal(over, &o); err != nil {
			return nil, invalidf("retry job %s: meta: %v", from, err)
		}
		for k, v := range o {
			m[k] = v
		}
	}
	m["retried_from"], _ = json.Marshal(from)
	return json.Marshal(m)
}
