package pronto

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pronto-jobs/pronto/internal/jsoncheck"
	"github.com/pronto-jobs/pronto/internal/txend"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// InsertManyParams is one job of an InsertMany call.
type InsertManyParams struct {
	Args JobArgs
	Opts *InsertOpts
}

// Insert stores one job and wakes a client that works its queue (within a millisecond or two when
// the job is due now). Bad args, names or options are refused with an error matching ErrInvalidArgs,
// and nothing is stored.
func (c *Client) Insert(ctx context.Context, args JobArgs, opts *InsertOpts) (*JobRow, error) {
	p, err := c.buildInsert(ctx, args, opts)
	if err != nil {
		return nil, err
	}
	rows, err := c.insert(ctx, []*store.InsertParams{p}, c.storeInsert)
	if err != nil {
		return nil, err
	}
	return rows[0], nil
}

// storeInsert writes jobs outside any application transaction. A single job goes through the insert
// batcher, which merges it with the single-job inserts of other callers into one store write (see
// internal/insertbatch); several jobs are written as one atomic batch of their own.
//
// The jobs a unique replace cancelled are reported here, once their cancels are written (see
// reportReplaced).
func (c *Client) storeInsert(ctx context.Context, ps []*store.InsertParams) ([]*store.Job, error) {
	var rows []*store.Job
	if len(ps) != 1 || c.inserts == nil {
		var err error
		if rows, err = c.store.Insert(ctx, ps); err != nil {
			return nil, err
		}
	} else {
		j, err := c.inserts.Insert(ctx, ps[0])
		if err != nil {
			return nil, err
		}
		rows = []*store.Job{j}
	}
	c.reportReplaced(ctx, rows)
	return rows, nil
}

// reportReplaced reports the cancels of the jobs that the unique jobs among rows replaced
// (store.Job.Replaced) as JobCancel reports one: an EventCancelled from this client, or from the
// run of the pronto client that was running it. Each replaced job is listed on the one job that
// replaced it, so a merged insert (internal/insertbatch) reports it once, to that job's caller.
// An insert into the application's transaction reports them once it commits (afterAppTxInsert).
func (c *Client) reportReplaced(ctx context.Context, rows []*store.Job) {
	var rep *cancelReporter
	for _, j := range rows {
		if len(j.Replaced) == 0 {
			continue
		}
		if rep == nil {
			rep = &cancelReporter{c: c} // one read of the client registry for the whole batch
		}
		c.reportCancels(ctx, j.Replaced, rep)
	}
}

// InsertMany stores many jobs atomically (all or none) with one notification per queue; on
// PostgreSQL up to 10,000 plain jobs are one INSERT in one round trip, larger batches use COPY.
func (c *Client) InsertMany(ctx context.Context, jobs []InsertManyParams) ([]*JobRow, error) {
	ps, err := c.buildInsertMany(ctx, jobs)
	if err != nil {
		return nil, err
	}
	return c.insert(ctx, ps, c.storeInsert)
}

// InsertManyFast stores many jobs atomically (all or none), as InsertMany does, and returns how many
// new jobs it stored instead of the jobs themselves: for bulk loads, where building a JobRow per job
// costs the caller time and memory it has no use for. A batch with a unique job that may replace another
// (UniqueReplace, UniqueReplaceExceptSchedule) runs as InsertMany, whose result names the jobs to
// report as cancelled. On PostgreSQL a plain batch (no unique keys,
// rate limits or workflow fields) of 10 jobs or more is then written without reading anything back.
// A unique job that met its key's holder under ConflictIgnore is not counted. With insert middleware
// configured (metrics, tracing), which reads the inserted rows, it runs as InsertMany.
func (c *Client) InsertManyFast(ctx context.Context, jobs []InsertManyParams) (int, error) {
	ps, err := c.buildInsertMany(ctx, jobs)
	if err != nil {
		return 0, err
	}
	fast, ok := c.store.(store.FastInserter)
	if !ok || len(c.cfg.InsertMiddleware) > 0 || replaces(ps) {
		rows, err := c.insert(ctx, ps, c.storeInsert)
		return store.CountStored(rows), err
	}
	adm, err := c.beforeInsert(ctx, ps, true)
	if err != nil {
		return 0, err
	}
	n, err := fast.InsertFast(ctx, ps)
	if err != nil {
		c.refund(adm.tenants, ps)
		c.settleDepths(adm.depths, ps, nil, err)
		return 0, fmt.Errorf("pronto: insert %d job(s): %w", len(ps), c.schemaCause(ctx, err))
	}
	c.settleFastDepths(adm.depths, ps, n)
	c.settleFastTenants(adm.tenants, ps, n)
	return n, nil
}

// settleFastDepths settles what checkBounds counted for an InsertFast of ps that stored n of them,
// without saying which (the others were unique duplicates): exactly when ps are all of one queue,
// else by recounting the queues at their next insert.
func (c *Client) settleFastDepths(adm depthAdmission, ps []*store.InsertParams, n int) {
	if len(adm.counts) == 0 || (n == len(ps) && adm.skipped == nil) {
		return
	}
	if !slices.ContainsFunc(ps, func(p *store.InsertParams) bool { return p.Queue != ps[0].Queue }) {
		counted := 0
		for i := range ps {
			if adm.counted(i) {
				counted++
			}
		}
		c.adjustDepths(adm, map[string]int64{ps[0].Queue: int64(n - counted)})
		return
	}
	c.forgetDepths(adm)
}

// replaces reports whether a job of ps may replace the holder of its unique key: its insert must
// return the jobs it cancelled, to report them, which InsertFast does not.
func replaces(ps []*store.InsertParams) bool {
	for _, p := range ps {
		if p.UniqueKey != "" && (p.OnConflict == store.ConflictReplace || p.OnConflict == store.ConflictReplaceExceptSchedule) {
			return true
		}
	}
	return false
}

// InsertTx stores one job inside the application's pgx transaction: the job exists, and clients are
// woken, only if tx commits; what the insert middleware defers with AfterInsertCommit (promexport's
// counts) is done then too. The store must be PostgreSQL; other stores return ErrUnsupported. The
// insert runs in a savepoint of tx (sent with it, no extra round trip): when it is refused (an id
// already taken, a unique conflict) nothing of it is kept and tx stays usable, as with InsertSQLTx.
// Each call is a subtransaction of tx, so insert many jobs with one InsertManyTx rather than a
// call per job (PostgreSQL caches 64 subtransactions of a transaction).
func (c *Client) InsertTx(ctx context.Context, tx pgx.Tx, args JobArgs, opts *InsertOpts) (*JobRow, error) {
	rows, err := c.InsertManyTx(ctx, tx, []InsertManyParams{{Args: args, Opts: opts}})
	if err != nil {
		return nil, err
	}
	return rows[0], nil
}

// InsertManyTx stores many jobs inside the application's pgx transaction (see InsertTx).
func (c *Client) InsertManyTx(ctx context.Context, tx pgx.Tx, jobs []InsertManyParams) ([]*JobRow, error) {
	ins, ok := c.store.(store.PgxTxInserter)
	if !ok {
		return nil, fmt.Errorf("%w: InsertTx needs the PostgreSQL store (this client's store is %T); use InsertSQLTx with SQLite", ErrUnsupported, c.store)
	}
	ps, err := c.buildInsertMany(ctx, jobs)
	if err != nil {
		return nil, err
	}
	atx, chose := c.newAppTx()
	atx.endProbe = func(ctx context.Context) (func(context.Context) (bool, error), bool) {
		return c.pgxTxEnd(ctx, tx)
	}
	rows, err := c.insert(context.WithValue(ctx, appTxKey{}, atx), ps, func(ctx context.Context, ps []*store.InsertParams) ([]*store.Job, error) {
		rows, err := ins.InsertPgxTx(ctx, tx, ps)
		if err == nil {
			chose(rows)
		}
		return rows, err
	})
	c.afterAppTxInsert(atx, rows, err)
	return rows, err
}

// InsertSQLTx stores one job inside the application's database/sql transaction on the same database
// (the SQLite store's file). Other stores return ErrUnsupported.
func (c *Client) InsertSQLTx(ctx context.Context, tx *sql.Tx, args JobArgs, opts *InsertOpts) (*JobRow, error) {
	rows, err := c.InsertManySQLTx(ctx, tx, []InsertManyParams{{Args: args, Opts: opts}})
	if err != nil {
		return nil, err
	}
	return rows[0], nil
}

// InsertManySQLTx stores many jobs inside the application's database/sql transaction (see InsertSQLTx).
func (c *Client) InsertManySQLTx(ctx context.Context, tx *sql.Tx, jobs []InsertManyParams) ([]*JobRow, error) {
	ins, ok := c.store.(store.SQLTxInserter)
	if !ok {
		return nil, fmt.Errorf("%w: InsertSQLTx needs the SQLite store (this client's store is %T); use InsertTx with PostgreSQL", ErrUnsupported, c.store)
	}
	ps, err := c.buildInsertMany(ctx, jobs)
	if err != nil {
		return nil, err
	}
	atx, chose := c.newAppTx()
	atx.endProbe = func(context.Context) (func(context.Context) (bool, error), bool) {
		return func(ctx context.Context) (bool, error) { return txend.SQLEnded(ctx, tx) }, true
	}
	rows, err := c.insert(context.WithValue(ctx, appTxKey{}, atx), ps, func(ctx context.Context, ps []*store.InsertParams) ([]*store.Job, error) {
		rows, err := ins.InsertSQLTx(ctx, tx, ps)
		if err == nil {
			chose(rows)
		}
		return rows, err
	})
	c.afterAppTxInsert(atx, rows, err)
	return rows, err
}

// afterAppTxInsert ends an insert into the application's transaction: once the transaction
// commits, it runs what the insert middleware deferred (AfterInsertCommit) and reports the cancels
// of the jobs that the unique jobs among rows replaced (see reportReplaced), from one watch of the
// commit; nothing if it rolls back.
func (c *Client) afterAppTxInsert(tx *appTx, rows []*store.Job, err error) {
	var rep func()
	if err == nil && slices.ContainsFunc(rows, func(j *store.Job) bool { return len(j.Replaced) > 0 }) {
		rep = func() { c.reportReplaced(c.commitWatch, rows) }
	}
	tx.inserted(rep)
}

// insert runs the insert middleware around do, the tenants' priority boosts applied to ps.
func (c *Client) insert(ctx context.Context, ps []*store.InsertParams, do InsertFunc) ([]*JobRow, error) {
	return c.insertBoosting(ctx, ps, do, true)
}

// insertBoosting is insert; boost false leaves the priorities of ps as they are, for jobs whose
// priority already holds their tenant's boost (a job retried by JobRetryWith keeps its priority:
// boosting it again would raise it on every retry).
func (c *Client) insertBoosting(ctx context.Context, ps []*store.InsertParams, do InsertFunc, boost bool) ([]*JobRow, error) {
	next := do
	for i := len(c.cfg.InsertMiddleware) - 1; i >= 0; i-- {
		mw, inner := c.cfg.InsertMiddleware[i], next
		next = func(ctx context.Context, ps []*store.InsertParams) ([]*JobRow, error) { return mw(ctx, ps, inner) }
	}
	adm, err := c.beforeInsert(ctx, ps, boost)
	if err != nil {
		return nil, err
	}
	rows, err := next(ctx, ps)
	if err == nil && (len(adm.depths.counts) > 0 || len(adm.tenants.tenants) > 0) {
		if tx, _ := ctx.Value(appTxKey{}).(*appTx); tx != nil {
			c.holdUntilTxEnds(ctx, tx, ps) // before settling lands the jobs
		}
	}
	c.refundUnstored(ctx, adm.tenants, ps, rows, err)
	c.settleDepths(adm.depths, ps, rows, err)
	if err != nil {
		err = batchUniqueCause(ps, err)
		return nil, fmt.Errorf("pronto: insert %d job(s): %w", len(ps), c.schemaCause(ctx, err))
	}
	return rows, nil
}

// admission is what beforeInsert counted for an insert, in the bounded queues' depths and the
// limited tenants' counts, so that the jobs the store does not insert can be taken back out.
type admission struct {
	depths  depthAdmission
	tenants tenantAdmission
}

// beforeInsert applies the tenants' priority boosts to ps (when boost is true) and refuses the insert
// when a queue's bound or a tenant's limit on waiting jobs would be passed. The caller settles what
// the store did not insert (Client.settleDepths, Client.refundUnstored).
func (c *Client) beforeInsert(ctx context.Context, ps []*store.InsertParams, boost bool) (admission, error) {
	// Rows in this binary's shape could fail, or worse mean something else, in a newer schema. An
	// insert-only client (never started, no watch) reads the schema itself now and then here.
	if err := c.haltRefusal(ctx, fmt.Sprintf("insert of %d job(s)", len(ps))); err != nil {
		return admission{}, err
	}
	if boost {
		c.applyTenantBoosts(ctx, ps)
	}
	held := heldKeys{ps: ps}
	depths, err := c.checkBounds(ctx, ps, &held)
	if err != nil {
		return admission{}, fmt.Errorf("pronto: insert %d job(s): %w", len(ps), err)
	}
	tenants, err := c.checkTenantLimits(ctx, ps, &held)
	if err != nil {
		c.refundDepths(depths, ps) // refused before the store: nothing of ps is kept
		return admission{}, fmt.Errorf("pronto: insert %d job(s): %w", len(ps), err)
	}
	return admission{depths: depths, tenants: tenants}, nil
}

// heldKeys is what one insert learns of its jobs' unique keys: looked up at most once, and only when
// a bound (a queue's maximum depth, a tenant's enqueue limit) is about to refuse the insert, so that
// the jobs that would store nothing do not count against it. An insert the bounds admit pays nothing.
type heldKeys struct {
	ps     []*store.InsertParams
	looked bool
	// dup[i] reports that ps[i] would meet its key's holder and store nothing; nil when no job would,
	// or the store cannot tell.
	dup []bool
}

// storesNothingWhenHeld reports whether p stores nothing when its unique key is held: a unique job
// under the ignore (a duplicate) or reject (a conflict) policy. A replacing job takes the key over,
// and room.
func storesNothingWhenHeld(p *store.InsertParams) bool {
	return p.UniqueKey != "" && (p.OnConflict == store.ConflictIgnore || p.OnConflict == store.ConflictReject || p.OnConflict == "")
}

// known returns what the look-up found, nil before it or when it found no duplicate.
func (h *heldKeys) known() []bool { return h.dup }

// mayHelp reports whether looking keys up could leave out of a refusing count one of the jobs for
// which counts holds: keys were not looked up yet, the store can say which are held, and such a job
// stores nothing when its key is held.
func (h *heldKeys) mayHelp(c *Client, counts func(*store.InsertParams) bool) bool {
	if h.looked {
		return false
	}
	if _, ok := c.store.(store.UniqueHolder); !ok {
		return false
	}
	return slices.ContainsFunc(h.ps, func(p *store.InsertParams) bool { return storesNothingWhenHeld(p) && counts(p) })
}

// duplicates looks up, in one call to the store, the held keys of the jobs that store nothing when
// their key is held, and returns which jobs would (see dup). A failed look-up is logged and finds
// none: the bound refuses the insert, as it would without the look-up.
func (h *heldKeys) duplicates(ctx context.Context, c *Client) []bool {
	if h.looked {
		return h.dup
	}
	h.looked = true
	uh, ok := c.store.(store.UniqueHolder)
	if !ok {
		return nil
	}
	var refs []store.UniqueKeyRef
	for _, p := range h.ps {
		if storesNothingWhenHeld(p) {
			refs = append(refs, store.UniqueKeyRef{Queue: p.Queue, Key: p.UniqueKey})
		}
	}
	if len(refs) == 0 {
		return nil
	}
	held, err := uh.HeldUniqueKeys(ctx, refs)
	if err != nil {
		c.cfg.Logger.Warn("pronto: looking up held unique keys for a refused insert failed; counting every job", "error", err)
		return nil
	}
	for i, p := range h.ps {
		if !storesNothingWhenHeld(p) {
			continue
		}
		if _, ok := held[store.UniqueKeyRef{Queue: p.Queue, Key: p.UniqueKey}]; ok {
			if h.dup == nil {
				h.dup = make([]bool, len(h.ps))
			}
			h.dup[i] = true
		}
	}
	return h.dup
}

func (c *Client) buildInsertMany(ctx context.Context, jobs []InsertManyParams) ([]*store.InsertParams, error) {
	return resolveAll(jobs, func(j InsertManyParams) (*store.InsertParams, error) { return c.buildInsert(ctx, j.Args, j.Opts) })
}

// resolveAll resolves every job of a batch, or names the first bad one ("job 3 of 10: ...").
func resolveAll[J any](jobs []J, resolve func(J) (*store.InsertParams, error)) ([]*store.InsertParams, error) {
	if len(jobs) == 0 {
		return nil, invalidf("no jobs to insert")
	}
	ps := make([]*store.InsertParams, len(jobs))
	for i, j := range jobs {
		p, err := resolve(j)
		if err != nil {
			if len(jobs) > 1 {
				return nil, fmt.Errorf("job %d of %d: %w", i, len(jobs), err)
			}
			return nil, err
		}
		ps[i] = p
	}
	return ps, nil
}

// LatestTime is the latest ScheduledAt or ExpiresAt a job may have: every store holds times up to
// it, and RFC 3339, the JSON form of times, writes four-digit years only.
var LatestTime = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// buildInsert validates and resolves one job (ctx bounds a read of the store's clock for a Delay).
func (c *Client) buildInsert(ctx context.Context, args JobArgs, opts *InsertOpts) (*store.InsertParams, error) {
	if args == nil {
		return nil, invalidf("args are nil")
	}
	if v := reflect.ValueOf(args); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, invalidf("args are a nil %T", args)
	}
	kind := args.Kind()
	if !ValidKind(kind) {
		return nil, invalidf("kind %q: must be %s", kind, KindRule)
	}
	raw, err := encodeArgs(args)
	if err != nil {
		return nil, err
	}
	o := InsertOpts{}
	if opts != nil {
		o = *opts
	}
	if withOpts, ok := args.(JobArgsWithInsertOpts); ok {
		o = o.merge(withOpts.InsertOpts())
	}
	return c.resolve(ctx, kind, raw, nil, o)
}

// resolve turns a kind, encoded args and options into insert params, or says what is wrong. meta,
// when not nil, is the job's meta as raw JSON (o.Meta must then be nil). A Delay counts from the
// store's clock (delayNow, which may read it under ctx); ScheduledAt and ExpiresAt are absolute
// times of the caller's.
func (c *Client) resolve(ctx context.Context, kind string, args, meta json.RawMessage, o InsertOpts) (*store.InsertParams, error) {
	if len(args) > c.cfg.MaxArgsBytes {
		return nil, invalidf("kind %q: args are %d bytes, over the limit of %d", kind, len(args), c.cfg.MaxArgsBytes)
	}
	if o.Queue == "" {
		o.Queue = DefaultQueue
	}
	if !ValidQueueName(o.Queue) {
		return nil, invalidf("queue name %q: must be %s", o.Queue, QueueNameRule)
	}
	if o.Priority < PriorityMin || o.Priority > PriorityMax {
		return nil, invalidf("priority %d: must be between %d and %d", o.Priority, PriorityMin, PriorityMax)
	}
	if !o.ScheduledAt.IsZero() && o.Delay != 0 {
		return nil, invalidf("set ScheduledAt or Delay, not both")
	}
	if o.Delay < 0 || o.Timeout < 0 || o.MaxAttempts < 0 {
		return nil, invalidf("Delay, Timeout and MaxAttempts must not be negative")
	}
	if r := o.Timeout % time.Millisecond; r != 0 {
		o.Timeout += time.Millisecond - r // stores keep whole milliseconds; 0 would mean none
	}
	for _, t := range []struct {
		name string
		at   time.Time
	}{{"ScheduledAt", o.ScheduledAt}, {"ExpiresAt", o.ExpiresAt}} {
		if t.at.After(LatestTime) {
			return nil, invalidf("%s %s: must not be after %s", t.name, t.at.UTC().Format(time.RFC3339), LatestTime.Format(time.RFC3339))
		}
	}
	id := o.ID
	if id == "" {
		id = uuidv7.New()
	} else if !uuidv7.Valid(id) {
		return nil, invalidf("id %q: must be a lowercase UUIDv7", id)
	}
	p := &store.InsertParams{
		ID: id, Kind: kind, Queue: o.Queue, Args: args, Priority: o.Priority,
		State: store.StateAvailable, Timeout: o.Timeout, Tags: o.Tags, ExpiresAt: o.ExpiresAt,
	}
	policy := c.cfg.RetryPolicy
	if o.RetryPolicy != nil {
		if err := o.RetryPolicy.Validate(); err != nil {
			return nil, err
		}
		b, err := json.Marshal(o.RetryPolicy)
		if err != nil {
			return nil, invalidf("retry policy: %v", err)
		}
		p.RetryPolicy = b
		policy = o.RetryPolicy.withDefaults(c.cfg.RetryPolicy)
	}
	p.MaxAttempts = policy.MaxAttempts
	if o.MaxAttempts > 0 {
		p.MaxAttempts = o.MaxAttempts
	}
	if p.MaxAttempts > store.MaxAttemptsLimit {
		return nil, invalidf("max attempts %d: must be at most %d", p.MaxAttempts, store.MaxAttemptsLimit)
	}
	p.Meta = meta
	if o.Meta != nil {
		b, err := json.Marshal(o.Meta)
		if err != nil {
			return nil, invalidf("meta does not encode as JSON: %v", err)
		}
		p.Meta = b
	}
	if err := checkCallerMeta(p.Meta, c.cfg.MaxMetaBytes); err != nil {
		return nil, fmt.Errorf("kind %q: %w", kind, err)
	}
	if err := checkStorable(kind, p); err != nil {
		return nil, err
	}
	now := c.wallNow()
	if o.Delay > 0 || !o.ExpiresAt.IsZero() || (o.Unique != nil && o.Unique.Period > 0) {
		// The store's clock judges when the job is due, whether it expired and when its unique
		// hold ends: these count from it (insert_clock.go), read only by an insert that has one.
		now = c.delayNow(ctx)
	}
	due, from := o.ScheduledAt, now
	if o.Delay > 0 {
		due = from.Add(o.Delay)
	}
	if due.After(from) {
		p.State, p.ScheduledAt = store.StateScheduled, due
	}
	if o.Pending {
		p.State = store.StatePending
	}
	if !o.ExpiresAt.IsZero() && !o.ExpiresAt.After(now) {
		return nil, invalidf("ExpiresAt %s is already past", o.ExpiresAt.Format(time.RFC3339))
	}
	if o.Unique != nil {
		if err := o.Unique.apply(p, now); err != nil {
			return nil, err
		}
	}
	if o.RateLimit != nil && o.RateKey == "" {
		return nil, invalidf("RateLimit needs a RateKey to store it under")
	}
	if o.RateKey != "" {
		if o.RateLimit != nil {
			if err := validateRateLimit(o.RateKey, o.RateLimit); err != nil {
				return nil, err
			}
		} else if !ValidRateKey(o.RateKey) {
			return nil, invalidf("rate key %q: must match [a-zA-Z0-9][a-zA-Z0-9._:-]* (at most 255 characters)", o.RateKey)
		}
		p.RateKey, p.RateLimit = o.RateKey, o.RateLimit
	}
	if o.Tenant != "" {
		if !ValidTenant(o.Tenant) {
			return nil, invalidf("tenant %q: must be 1 to 255 printable ASCII characters without spaces", o.Tenant)
		}
		p.Tenant = o.Tenant
	}
	return p, nil
}

// checkStorable refuses a job holding what some store cannot hold (a NUL character, bytes that are
// not UTF-8, a lone surrogate, a number out of range), so that every store refuses it alike with an
// error naming the field, instead of PostgreSQL answering with a database error.
func checkStorable(kind string, p *store.InsertParams) error {
	err := jsoncheck.Check(p.Args, "args")
	if err == nil && len(p.Meta) > 0 {
		err = jsoncheck.Check(p.Meta, "meta")
	}
	if err == nil {
		err = jsoncheck.CheckStrings(p.Tags, "tags")
	}
	if err == nil && len(p.RetryPolicy) > 0 {
		err = jsoncheck.Check(p.RetryPolicy, "retry policy")
	}
	if err != nil {
		return unstorable(kind, err)
	}
	return nil
}

// unstorable wraps a jsoncheck error as ErrInvalidArgs; errors.As still finds the *jsoncheck.Error.
func unstorable(kind string, err error) error {
	return fmt.Errorf("%w: kind %q: %w", ErrInvalidArgs, kind, err)
}

// RawJob is a job given in OJS terms rather than as a Go type: its kind and its args as a JSON array
// (any JSON-native values). The OJS HTTP API and the CLI insert through it.
type RawJob struct {
	Kind string
	// Args must be a JSON array.
	Args json.RawMessage
	Opts InsertOpts
}

// InsertRaw stores jobs given in OJS terms atomically, with the same validation, middleware and
// notifications as InsertMany.
func (c *Client) InsertRaw(ctx context.Context, jobs []RawJob) ([]*JobRow, error) {
	ps, err := resolveAll(jobs, func(j RawJob) (*store.InsertParams, error) { return c.resolveRaw(ctx, j) })
	if err != nil {
		return nil, err
	}
	return c.insert(ctx, ps, c.storeInsert)
}

func (c *Client) resolveRaw(ctx context.Context, j RawJob) (*store.InsertParams, error) {
	if !ValidKind(j.Kind) {
		return nil, invalidf("kind %q: must be %s", j.Kind, KindRule)
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(j.Args, &elems); err != nil || elems == nil {
		return nil, invalidf("kind %q: args must be a JSON array", j.Kind)
	}
	return c.resolve(ctx, j.Kind, j.Args, nil, j.Opts)
}

// ownMetaKeys are the meta members pronto itself writes: the OJS server's "_pronto" (a job's
// unknown envelope attributes, step id, visibility timeout...), a cron occurrence's and a retry's
// marks. They are not the caller's meta, so they do not count against its limit: a cron template
// accepted under the limit must not be refused at every occurrence.
var ownMetaKeys = []string{"_pronto", "cron_name", "cron_triggered_at", "retried_from", "ojs.replay_count"}

// checkCallerMeta is CheckMetaSize of meta without ownMetaKeys. It decodes meta only when the whole
// of it is over the limit.
func checkCallerMeta(meta json.RawMessage, limit int) error {
	err := CheckMetaSize(meta, limit)
	if err == nil {
		return nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(meta, &m) != nil {
		return err
	}
	n := len(m)
	for _, k := range ownMetaKeys {
		delete(m, k)
	}
	if len(m) == n {
		return err
	}
	own, merr := json.Marshal(m)
	if merr != nil {
		return err
	}
	return CheckMetaSize(own, limit)
}
