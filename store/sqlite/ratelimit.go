package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

var _ store.RateLimiter = (*Store)(nil)

// Rate limits live in pronto_rate_limits: the limit as given and its current window (when it opened,
// how many jobs it started). A key's active jobs are counted from the jobs table through the
// pronto_jobs_rate index, so no counter has to follow every path out of active. Claims that meet a
// limited job enforce the limits in claimLimited, inside the claim's write transaction: SQLite's one
// writer at a time, across processes too, makes the count and the claim one step.

// rescheduleAfter is how far LimitReschedule moves a job held back by MaxActive alone (no window end
// to wait for).
const rescheduleAfter = time.Second

// validateRateLimit checks a limit before it is stored.
func validateRateLimit(key string, l store.RateLimit) error {
	if key == "" {
		return fmt.Errorf("%w: empty rate key", store.ErrInvalidParams)
	}
	if l.MaxActive < 0 || l.Rate < 0 || l.Period < 0 {
		return fmt.Errorf("%w: rate limit %s: max active %d, rate %d and period %v cannot be negative",
			store.ErrInvalidParams, key, l.MaxActive, l.Rate, l.Period)
	}
	// A zero field bounds nothing: a Rate without a Period is stored and bounds nothing, as in every
	// store (pronto.Client refuses it before it gets here).
	switch l.OnLimit {
	case "", store.LimitWait, store.LimitReschedule, store.LimitDrop:
	default:
		return fmt.Errorf("%w: rate limit %s: on-limit action %q; want wait, reschedule or drop", store.ErrInvalidParams, key, l.OnLimit)
	}
	return nil
}

// upsertRateLimits stores the limits params carry, in order (a later one for the same key wins).
func upsertRateLimits(ctx context.Context, r txRunner, params []*store.InsertParams, nowUS int64) error {
	for _, p := range params {
		if p.RateLimit == nil {
			continue
		}
		if err := storeRateLimit(ctx, r, p.RateKey, *p.RateLimit, nowUS); err != nil {
			return fmt.Errorf("store rate limit %s: %w", p.RateKey, err)
		}
	}
	return nil
}

// storeRateLimit creates or replaces the limit under key in r's transaction. When it replaces a
// different limit, the key's held jobs return to the claim index, to be judged by the new limit.
func storeRateLimit(ctx context.Context, r txRunner, key string, l store.RateLimit, nowUS int64) error {
	old, err := storedRateLimit(ctx, r, key)
	if err != nil {
		return err
	}
	if _, err := r.ExecContext(ctx, upsertRateLimitSQL, key, int64(l.MaxActive), int64(l.Rate),
		l.Period.Microseconds(), string(l.OnLimit), nowUS); err != nil {
		return err
	}
	changed := old != nil && (old.MaxActive != l.MaxActive || old.Rate != l.Rate ||
		old.Period != time.Duration(l.Period.Microseconds())*time.Microsecond || old.OnLimit != l.OnLimit)
	if changed {
		if _, err := r.ExecContext(ctx, releaseHeldSQL, key); err != nil {
			return err
		}
	}
	return nil
}

// storedRateLimit reads the limit under key in r's transaction, or nil.
func storedRateLimit(ctx context.Context, r txRunner, key string) (*store.RateLimit, error) {
	rows, err := r.QueryContext(ctx, rateLimitValuesSQL, key)
	if err != nil {
		return nil, err
	}
	var l *store.RateLimit
	for rows.Next() {
		var maxActive, rate, periodUS int64
		var onLimit string
		if err := rows.Scan(&maxActive, &rate, &periodUS, &onLimit); err != nil {
			rows.Close()
			return nil, err
		}
		l = &store.RateLimit{MaxActive: int(maxActive), Rate: int(rate),
			Period: time.Duration(periodUS) * time.Microsecond, OnLimit: store.LimitAction(onLimit)}
	}
	if err := closeRows(rows); err != nil {
		return nil, err
	}
	return l, nil
}

// rateLimitQueries are the statements storeRateLimit runs.
var rateLimitQueries = []string{rateLimitValuesSQL, upsertRateLimitSQL, releaseHeldSQL}

// SetRateLimit creates or replaces the limit stored under key. A replaced limit keeps its current
// window (so setting the limit again, as clients do with every insert that carries it, does not
// reset the count). The producers of the queues holding claimable jobs of the key are woken: the new
// limit may allow more.
func (s *Store) SetRateLimit(ctx context.Context, key string, l store.RateLimit) error {
	if err := validateRateLimit(key, l); err != nil {
		return fmt.Errorf("set rate limit: %w", err)
	}
	r, err := s.begin(ctx, rateLimitQueries...)
	if err != nil {
		return fmt.Errorf("set rate limit %s: %w", key, err)
	}
	defer r.tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	nowUS, _ := s.nowMicro()
	if err := storeRateLimit(ctx, r, key, l, nowUS); err != nil {
		return fmt.Errorf("set rate limit %s: %w", key, err)
	}
	if err := r.tx.Commit(); err != nil {
		return fmt.Errorf("set rate limit %s: commit: %w", key, err)
	}
	return s.wakeRateKey(ctx, key)
}

// DeleteRateLimit removes the limit stored under key, or returns an error wrapping store.ErrNotFound.
// The key's jobs are unlimited from then on, and the producers of their queues are woken.
func (s *Store) DeleteRateLimit(ctx context.Context, key string) error {
	r, err := s.begin(ctx, deleteRateLimitSQL, releaseHeldSQL)
	if err != nil {
		return fmt.Errorf("delete rate limit %s: %w", key, err)
	}
	defer r.tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	res, err := r.ExecContext(ctx, deleteRateLimitSQL, key)
	if err != nil {
		return fmt.Errorf("delete rate limit %s: %w", key, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("delete rate limit %s: %w", key, err)
	}
	if n == 0 {
		return fmt.Errorf("delete rate limit %s: %w", key, store.ErrNotFound)
	}
	if _, err := r.ExecContext(ctx, releaseHeldSQL, key); err != nil {
		return fmt.Errorf("delete rate limit %s: %w", key, err)
	}
	if err := r.tx.Commit(); err != nil {
		return fmt.Errorf("delete rate limit %s: commit: %w", key, err)
	}
	return s.wakeRateKey(ctx, key)
}

// wakeRateKey announces every queue holding claimable jobs of key.
func (s *Store) wakeRateKey(ctx context.Context, key string) error {
	rows, err := s.r.QueryContext(ctx, rateKeyQueuesSQL, key)
	if err != nil {
		return fmt.Errorf("wake queues of rate key %s: %w", key, err)
	}
	var out outbox
	for rows.Next() {
		var q string
		if err := rows.Scan(&q); err != nil {
			rows.Close()
			return fmt.Errorf("wake queues of rate key %s: %w", key, err)
		}
		out.wake(q, time.Time{})
	}
	if err := closeRows(rows); err != nil {
		return fmt.Errorf("wake queues of rate key %s: %w", key, err)
	}
	s.publishOutbox(&out)
	return nil
}

// GetRateLimit returns the limit stored under key with its current use, or an error wrapping
// store.ErrNotFound.
func (s *Store) GetRateLimit(ctx context.Context, key string) (*store.RateLimitInfo, error) {
	nowUS, _ := s.nowMicro()
	infos, err := s.rateLimitInfos(ctx, getRateLimitSQL, nowUS, key)
	if err != nil {
		return nil, fmt.Errorf("get rate limit %s: %w", key, err)
	}
	if len(infos) == 0 {
		return nil, fmt.Errorf("get rate limit %s: %w", key, store.ErrNotFound)
	}
	return infos[0], nil
}

// ListRateLimits returns every stored limit with its current use, in key order.
func (s *Store) ListRateLimits(ctx context.Context) ([]*store.RateLimitInfo, error) {
	nowUS, _ := s.nowMicro()
	infos, err := s.rateLimitInfos(ctx, listRateLimitsSQL, nowUS)
	if err != nil {
		return nil, fmt.Errorf("list rate limits: %w", err)
	}
	return infos, nil
}

// rateLimitInfos runs a rateLimitInfoSQL query (?1 now) on a reader.
func (s *Store) rateLimitInfos(ctx context.Context, query string, nowUS int64, args ...any) ([]*store.RateLimitInfo, error) {
	rows, err := s.r.QueryContext(ctx, query, append([]any{nowUS}, args...)...)
	if err != nil {
		return nil, s.schemaHint(err)
	}
	var out []*store.RateLimitInfo
	for rows.Next() {
		var info store.RateLimitInfo
		var k keyLimit
		if err := rows.Scan(&info.Key, &k.maxActive, &k.rate, &k.periodUS, &k.onLimit, &k.windowStart,
			&k.windowCount, &info.Active, &info.Waiting); err != nil {
			rows.Close()
			return nil, err
		}
		info.Limit = store.RateLimit{MaxActive: int(k.maxActive), Rate: int(k.rate),
			Period: time.Duration(k.periodUS) * time.Microsecond, OnLimit: store.LimitAction(k.onLimit)}
		if k.windowOpen(nowUS) {
			info.WindowStart = microTime(k.windowStart.Int64)
			info.WindowCount = k.windowCount
		}
		out = append(out, &info)
	}
	if err := closeRows(rows); err != nil {
		return nil, err
	}
	return out, nil
}

// keyLimit is one rate key's limit and use during a limited claim.
type keyLimit struct {
	maxActive, rate, periodUS int64
	onLimit                   string
	windowStart               sql.NullInt64
	windowCount               int64
	active                    int64
	windowMoved               bool // the claim opened or filled the window: write it back
}

// rateBound reports whether the limit bounds starts per period.
func (k *keyLimit) rateBound() bool { return k.rate > 0 && k.periodUS > 0 }

// windowOpen reports whether the key's rate window is still open at nowUS.
func (k *keyLimit) windowOpen(nowUS int64) bool {
	return k.rateBound() && k.windowStart.Valid && nowUS < k.windowStart.Int64+k.periodUS
}

// room is how many more of the key's jobs may start now.
func (k *keyLimit) room(nowUS int64) int64 {
	room := int64(math.MaxInt64)
	if k.maxActive > 0 {
		room = min(room, k.maxActive-k.active)
	}
	if k.rateBound() {
		if k.windowOpen(nowUS) {
			room = min(room, k.rate-k.windowCount)
		} else {
			room = min(room, k.rate)
		}
	}
	return max(room, 0)
}

// hit describes the key's exhausted limit, named key (store.NewLimitHit).
func (k *keyLimit) hit(key string, nowUS int64) store.LimitHit {
	var wc int64
	if k.windowOpen(nowUS) {
		wc = k.windowCount
	}
	l := store.RateLimit{MaxActive: int(k.maxActive), Rate: int(k.rate), Period: time.Duration(k.periodUS) * time.Microsecond}
	return store.NewLimitHit(key, l, k.active, wc)
}

// take counts one more of the key's jobs started now, opening a window if none is open.
func (k *keyLimit) take(nowUS int64) {
	k.active++
	if !k.rateBound() {
		return
	}
	if !k.windowOpen(nowUS) {
		k.windowStart = sql.NullInt64{Int64: nowUS, Valid: true}
		k.windowCount = 0
	}
	k.windowCount++
	k.windowMoved = true
}

// retryAt is when LimitReschedule makes a held-back job due: the end of the full window, or, when
// only MaxActive holds it back, a second from now.
func (k *keyLimit) retryAt(nowUS int64) int64 {
	if k.windowOpen(nowUS) && k.windowCount >= k.rate {
		return k.windowStart.Int64 + k.periodUS
	}
	return nowUS + rescheduleAfter.Microseconds()
}

// candidate is one claimable job a limited claim considers.
type candidate struct {
	rowid       int64
	rateKey     sql.NullString
	tenant      sql.NullString
	priority    int64
	scheduledAt int64
	id          string
}

// limitedClaim is what a limited claim decided: the jobs it takes, and what it does with the jobs of
// exhausted keys it passed over.
type limitedClaim struct {
	keys       map[string]*keyLimit // nil value: the key has no stored limit
	tenants    map[string]*keyLimit // the limits of the candidates' tenants; nil value: none stored
	take       []int64              // rowids
	reschedule [][2]int64           // [rowid, due]
	drop       []int64              // rowids
	waiting    []string             // exhausted keys whose jobs wait: left out of the next pages, then held
	// tenantsWaiting are the tenants at their limit: their jobs wait (a tenant's limit always does),
	// left out of the next pages. Unlike a key's, they are not held: a tenant's jobs spread over
	// rate keys and queues, and its limit is not a key of theirs that a changed limit could release.
	tenantsWaiting []string
	// dropped and rescheduled are the jobs apply dropped and rescheduled, as they now are.
	dropped, rescheduled []*store.Job
	// limited are the keys whose limit had no room for a job of theirs (store.ClaimParams.OnLimited);
	// took, the keys with a limit of the jobs taken.
	limited []store.LimitHit
	took    map[string]bool
}

// limitedClaimFirstPage is how many candidates beyond its limit a limited claim reads first; every
// further page is twice the last, so a claim reads a long run of held-back jobs in few queries.
const limitedClaimFirstPage = 32

// holdBatch bounds how many jobs of one exhausted key a claim holds (moves out of the claim index):
// a backlog larger than that is held over the next few claims.
const holdBatch = 10_000

// claimLimited claims up to p.Limit jobs in one write transaction, enforcing the rate limits of the
// jobs' keys and their tenants' limits. It walks the claimable jobs in claim order, takes each one
// whose key has room (or has no limit) and whose tenant has room (or has no limit), and passes over
// the jobs of exhausted keys, applying their limit's OnLimit: wait leaves them as they are, and the
// key is left out of the rest of the walk; reschedule schedules them at the window's end; drop
// discards them with a rate_limited error. A tenant at its limit is left out of the rest of the walk
// (its limit always waits). It stops once it has p.Limit jobs.
//
// A waiting key's claimable jobs in the queue are then held: moved out of the claim index, invisible
// otherwise, so that later claims do not walk past them again (a backlog of thousands behind a full
// rate window would cost every claim a walk through all of them). Held jobs are merged back into the
// walk, in claim order, as many as their key has room for; a changed or deleted limit releases them.
//
// Windows opened or filled are written back, dropped workflow jobs decide their children, and the
// queues of rescheduled jobs and released children are announced once it commits.
func (s *Store) claimLimited(ctx context.Context, p store.ClaimParams) ([]*store.Job, error) {
	candSQL, heldSQL := claimCandidatesSQL(len(p.Kinds)), heldCandidatesSQL(len(p.Kinds))
	r, err := s.begin(ctx, append([]string{candSQL, heldSQL, heldKeysSQL, rateLimitStateSQL, claimRowsSQL,
		setWindowSQL, holdKeySQL, rescheduleRowsSQL, dropRowsSQL, fairLimitSQL, fairActiveSQL}, settleQueries...)...)
	if err != nil {
		return nil, err
	}
	defer r.tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	nowUS, now := s.nowMicro()

	plan := limitedClaim{keys: map[string]*keyLimit{}, tenants: map[string]*keyLimit{}}
	held, err := plan.heldCandidates(ctx, r, heldSQL, p, nowUS)
	if err != nil {
		return nil, err
	}
	pageSize := p.Limit + limitedClaimFirstPage
	var cursor *candidate
	for len(plan.take) < p.Limit {
		page, err := claimCandidates(ctx, r, candSQL, p, nowUS, pageSize, plan.waiting, plan.tenantsWaiting, cursor)
		if err != nil {
			return nil, err
		}
		for i := range page {
			// Held jobs ranked before this one come first.
			for len(held) > 0 && len(plan.take) < p.Limit && held[0].before(&page[i]) {
				if err := plan.consider(ctx, r, &held[0], nowUS); err != nil {
					return nil, err
				}
				held = held[1:]
			}
			if len(plan.take) == p.Limit {
				break
			}
			if err := plan.consider(ctx, r, &page[i], nowUS); err != nil {
				return nil, err
			}
		}
		if len(page) < pageSize {
			break
		}
		cursor = &page[len(page)-1]
		pageSize *= 2
	}
	for len(held) > 0 && len(plan.take) < p.Limit {
		if err := plan.consider(ctx, r, &held[0], nowUS); err != nil {
			return nil, err
		}
		held = held[1:]
	}

	var out outbox
	jobs, err := plan.apply(ctx, r, p, nowUS, now, &out)
	if err != nil {
		return nil, err
	}
	if p.OnLimited != nil {
		if err := plan.spentKeys(ctx, r, p, nowUS); err != nil {
			return nil, err
		}
	}
	if err := r.tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	s.publishOutbox(&out)
	p.ReportHeldBack(plan.dropped, plan.rescheduled)
	p.ReportLimited(plan.limited)
	return jobs, nil
}

// spentKeys adds to c.limited the keys the claim read (those of the jobs it walked, and those with
// held jobs) that it leaves without room while a due job of theirs of the claim's kinds waits in the
// queue, held or not, and, with HasRoom, those of the jobs it took that have room left and such a job
// waiting. Run after apply, when the jobs taken are active. One query asks for every such key at
// once: it runs in the write transaction, so its cost must not grow by a statement per full key.
func (c *limitedClaim) spentKeys(ctx context.Context, r txRunner, p store.ClaimParams, nowUS int64) error {
	var keys []string
	for key, k := range c.keys {
		if k == nil || (k.room(nowUS) > 0 && !c.took[key]) ||
			slices.ContainsFunc(c.limited, func(h store.LimitHit) bool { return h.Key == key }) {
			continue
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil
	}
	list, err := jsonList(keys)
	if err != nil {
		return err
	}
	args := make([]any, 3, 3+len(p.Kinds))
	args[0], args[1], args[2] = nowUS, p.Queue, list
	for _, kind := range p.Kinds {
		args = append(args, kind)
	}
	keysWaitingQueries.Add(1)
	rows, err := r.QueryContext(ctx, keysWaitingSQL(len(p.Kinds)), args...)
	if err != nil {
		return fmt.Errorf("look for waiting jobs of limited keys: %w", err)
	}
	for rows.Next() {
		var key string
		if err := rows.Scan(&key); err != nil {
			rows.Close()
			return fmt.Errorf("look for waiting jobs of limited keys: %w", err)
		}
		if k := c.keys[key]; k.room(nowUS) > 0 {
			c.limited = append(c.limited, store.LimitHit{Key: key, HasRoom: true})
		} else {
			c.limited = append(c.limited, k.hit(key, nowUS))
		}
	}
	if err := closeRows(rows); err != nil {
		return fmt.Errorf("look for waiting jobs of limited keys: %w", err)
	}
	return nil
}

// keysWaitingQueries counts the queries spentKeys ran, so that a test can tell that a claim asks
// once however many keys it found full.
var keysWaitingQueries atomic.Int64

// keysWaitingSQL lists the rate keys of the JSON array ?3 that have a due job in queue ?2 waiting to
// be claimed, held or not: one index probe per key, stopping at its first job. ?1 now, ?4... kinds.
func keysWaitingSQL(nKinds int) string {
	return `SELECT w.value FROM json_each(?3) AS w WHERE EXISTS (SELECT 1 FROM pronto_jobs
	WHERE queue = ?2 AND rate_key = w.value AND ` + claimableStatesSQL + `
	  AND scheduled_at <= ?1
	  AND (expires_at IS NULL OR expires_at > ?1)
	  ` + kindsFilter(nKinds, 4) + `)`
}

// before reports whether c comes before d in claim order.
func (c *candidate) before(d *candidate) bool {
	if c.priority != d.priority {
		return c.priority > d.priority
	}
	if c.scheduledAt != d.scheduledAt {
		return c.scheduledAt < d.scheduledAt
	}
	return c.id < d.id
}

// heldCandidates reads the limits of the keys with held jobs in the queue (into c.keys) and returns,
// in claim order, the held jobs a claim may take: for each key, as many as it has room for (up to the
// claim's limit).
func (c *limitedClaim) heldCandidates(ctx context.Context, r txRunner, query string, p store.ClaimParams, nowUS int64) ([]candidate, error) {
	rows, err := r.QueryContext(ctx, heldKeysSQL, p.Queue)
	if err != nil {
		return nil, fmt.Errorf("read held rate keys: %w", err)
	}
	for rows.Next() {
		var key string
		var stored bool
		k := &keyLimit{}
		if err := rows.Scan(&key, &k.maxActive, &k.rate, &k.periodUS, &k.onLimit, &stored, &k.windowStart,
			&k.windowCount, &k.active); err != nil {
			rows.Close()
			return nil, err
		}
		if !stored {
			k = nil
		}
		c.keys[key] = k
	}
	if err := closeRows(rows); err != nil {
		return nil, fmt.Errorf("read held rate keys: %w", err)
	}
	var out []candidate
	for key, k := range c.keys {
		n := int64(p.Limit)
		if k != nil {
			n = min(n, k.room(nowUS))
		}
		if n <= 0 {
			continue
		}
		args := make([]any, 4, 4+len(p.Kinds))
		args[0], args[1], args[2], args[3] = nowUS, key, n, p.Queue
		for _, kind := range p.Kinds {
			args = append(args, kind)
		}
		page, err := readCandidates(r.QueryContext(ctx, query, args...))
		if err != nil {
			return nil, fmt.Errorf("read held jobs of %s: %w", key, err)
		}
		out = append(out, page...)
	}
	slices.SortFunc(out, func(a, b candidate) int {
		if a.before(&b) {
			return -1
		}
		return 1
	})
	return out, nil
}

// claimCandidates reads one page of a limited claim's candidates, after cursor (nil: from the start),
// leaving out the jobs of the keys in waiting and of the tenants in tenantsWaiting.
func claimCandidates(ctx context.Context, r txRunner, query string, p store.ClaimParams, nowUS int64, size int, waiting, tenantsWaiting []string, cursor *candidate) ([]candidate, error) {
	left, err := jsonList(waiting)
	if err != nil {
		return nil, err
	}
	leftTenants, err := jsonList(tenantsWaiting)
	if err != nil {
		return nil, err
	}
	args := make([]any, 8, 8+len(p.Kinds))
	args[0], args[1], args[2], args[3] = nowUS, int64(size), left, p.Queue
	if cursor != nil {
		args[4], args[5], args[6] = cursor.priority, cursor.scheduledAt, cursor.id
	}
	args[7] = leftTenants
	for _, k := range p.Kinds {
		args = append(args, k)
	}
	page, err := readCandidates(r.QueryContext(ctx, query, args...))
	if err != nil {
		return nil, fmt.Errorf("read claim candidates: %w", err)
	}
	return page, nil
}

// jsonList is names as a JSON array, [] for none.
func jsonList(names []string) (string, error) {
	if names == nil {
		return "[]", nil
	}
	b, err := json.Marshal(names)
	return string(b), err
}

// readCandidates reads the rows of a candidates query and closes them.
func readCandidates(rows *sql.Rows, err error) ([]candidate, error) {
	if err != nil {
		return nil, err
	}
	var page []candidate
	for rows.Next() {
		var c candidate
		if err := rows.Scan(&c.rowid, &c.rateKey, &c.tenant, &c.priority, &c.scheduledAt, &c.id); err != nil {
			rows.Close()
			return nil, err
		}
		page = append(page, c)
	}
	if err := closeRows(rows); err != nil {
		return nil, err
	}
	return page, nil
}

// consider decides one candidate: take it when its key's limit and its tenant's both have room (a
// start counts against both), pass it over as its key's OnLimit says when the key has none, and
// leave it waiting when its tenant has none.
func (c *limitedClaim) consider(ctx context.Context, r txRunner, cand *candidate, nowUS int64) error {
	var k *keyLimit
	key := cand.rateKey.String
	if cand.rateKey.Valid {
		var known bool
		if k, known = c.keys[key]; !known {
			var err error
			if k, err = loadKeyLimit(ctx, r, key); err != nil {
				return err
			}
			if tl := c.tenants[strings.TrimPrefix(key, "tenant:")]; k != nil && tl != nil && strings.HasPrefix(key, "tenant:") {
				// A tenant's limit key names the limit already read for the tenant: one limit, one
				// count (its active count is the tenant's either way).
				tl.onLimit = k.onLimit
				k = tl
			}
			c.keys[key] = k
		}
	}
	tenant := cand.tenant.String
	if k != nil && cand.tenant.Valid && key == store.TenantLimitKey(tenant) {
		// The job names its own tenant's limit: that limit, which always waits, is checked below as
		// its tenant's, once (tenantLimit shares the key's state).
		k = nil
	}
	if k == nil || k.room(nowUS) > 0 {
		var tl *keyLimit
		if cand.tenant.Valid {
			var err error
			if tl, err = c.tenantLimit(ctx, r, tenant); err != nil {
				return err
			}
			if tl != nil && tl.room(nowUS) <= 0 {
				if key == store.TenantLimitKey(tenant) {
					// Its rate key is that limit: the key had no room.
					c.limited = store.AddLimitHit(c.limited, tl.hit(key, nowUS))
				}
				if !slices.Contains(c.tenantsWaiting, tenant) {
					c.tenantsWaiting = append(c.tenantsWaiting, tenant)
				}
				return nil
			}
		}
		if k != nil && k != tl {
			k.take(nowUS)
		}
		if cand.rateKey.Valid && c.keys[key] != nil {
			if c.took == nil {
				c.took = map[string]bool{}
			}
			c.took[key] = true
		}
		if tl != nil {
			tl.take(nowUS)
		}
		c.take = append(c.take, cand.rowid)
		return nil
	}
	c.limited = store.AddLimitHit(c.limited, k.hit(key, nowUS))
	switch store.LimitAction(k.onLimit) {
	case store.LimitReschedule:
		c.reschedule = append(c.reschedule, [2]int64{cand.rowid, k.retryAt(nowUS)})
	case store.LimitDrop:
		c.drop = append(c.drop, cand.rowid)
	default:
		if !slices.Contains(c.waiting, key) {
			c.waiting = append(c.waiting, key)
		}
	}
	return nil
}

// tenantLimit returns the limit stored under tenant's limit key with the tenant's active jobs across
// queues, read once per claim, or nil when none bounds anything.
func (c *limitedClaim) tenantLimit(ctx context.Context, r txRunner, tenant string) (*keyLimit, error) {
	if k, known := c.tenants[tenant]; known {
		return k, nil
	}
	if k := c.keys[store.TenantLimitKey(tenant)]; k != nil {
		// Read already as a rate key, with the tenant's active count: the same limit.
		c.tenants[tenant] = k
		return k, nil
	}
	k := &keyLimit{}
	err := r.QueryRowContext(ctx, fairLimitSQL, store.TenantLimitKey(tenant)).Scan(&k.maxActive, &k.rate,
		&k.periodUS, &k.windowStart, &k.windowCount)
	if errors.Is(err, sql.ErrNoRows) {
		k = nil
	} else if err != nil {
		return nil, fmt.Errorf("read the limit of tenant %s: %w", tenant, err)
	} else if k.maxActive > 0 {
		if err := r.QueryRowContext(ctx, fairActiveSQL, tenant).Scan(&k.active); err != nil {
			return nil, fmt.Errorf("count the active jobs of tenant %s: %w", tenant, err)
		}
	}
	c.tenants[tenant] = k
	return k, nil
}

// loadKeyLimit reads key's limit and active count, or nil when no limit is stored under key.
func loadKeyLimit(ctx context.Context, r txRunner, key string) (*keyLimit, error) {
	rows, err := r.QueryContext(ctx, rateLimitStateSQL, key)
	if err != nil {
		return nil, fmt.Errorf("read rate limit %s: %w", key, err)
	}
	var k *keyLimit
	for rows.Next() {
		k = &keyLimit{}
		if err := rows.Scan(&k.maxActive, &k.rate, &k.periodUS, &k.onLimit, &k.windowStart, &k.windowCount,
			&k.active); err != nil {
			rows.Close()
			return nil, err
		}
	}
	if err := closeRows(rows); err != nil {
		return nil, fmt.Errorf("read rate limit %s: %w", key, err)
	}
	return k, nil
}

// apply writes what the claim decided and returns the claimed jobs.
func (c *limitedClaim) apply(ctx context.Context, r txRunner, p store.ClaimParams, nowUS int64, now time.Time, out *outbox) ([]*store.Job, error) {
	var jobs []*store.Job
	if len(c.take) > 0 {
		b, err := json.Marshal(c.take)
		if err != nil {
			return nil, err
		}
		jobs, err = retryLapsed(ctx, r, nowUS, func() ([]*store.Job, error) {
			rows, err := r.QueryContext(ctx, claimRowsSQL, nowUS, nowUS+p.LeaseDuration.Microseconds(), p.WorkerID, string(b))
			if err != nil {
				return nil, err
			}
			return scanJobs(rows, len(c.take))
		})
		if err != nil {
			return nil, fmt.Errorf("claim: %w", err)
		}
	}
	for _, key := range c.waiting {
		if _, err := r.ExecContext(ctx, holdKeySQL, key, p.Queue, nowUS, holdBatch); err != nil {
			return nil, fmt.Errorf("hold jobs of %s: %w", key, err)
		}
	}
	for key, k := range c.keys {
		if k == nil || !k.windowMoved {
			continue
		}
		if _, err := r.ExecContext(ctx, setWindowSQL, key, k.windowStart.Int64, k.windowCount); err != nil {
			return nil, fmt.Errorf("record rate window of %s: %w", key, err)
		}
	}
	for tenant, k := range c.tenants {
		if k == nil || !k.windowMoved {
			continue
		}
		if _, err := r.ExecContext(ctx, setWindowSQL, store.TenantLimitKey(tenant), k.windowStart.Int64, k.windowCount); err != nil {
			return nil, fmt.Errorf("record rate window of tenant %s: %w", tenant, err)
		}
	}
	if len(c.reschedule) > 0 {
		var err error
		if c.rescheduled, err = rescheduleHeldBack(ctx, r, c.reschedule, nowUS, out); err != nil {
			return nil, err
		}
	}
	if len(c.drop) > 0 {
		var err error
		if c.dropped, err = dropHeldBack(ctx, r, c.drop, nowUS, now, out); err != nil {
			return nil, err
		}
	}
	return jobs, nil
}

// rescheduleHeldBack moves held-back jobs ([rowid, due] pairs) to scheduled at their due times, one
// statement per due time (a claim's held-back keys have one each), announces them, and returns them
// as they now are.
func rescheduleHeldBack(ctx context.Context, r txRunner, due [][2]int64, nowUS int64, out *outbox) ([]*store.Job, error) {
	byDue := map[int64][]int64{}
	for _, d := range due {
		byDue[d[1]] = append(byDue[d[1]], d[0])
	}
	var moved []*store.Job
	for _, at := range slices.Sorted(maps.Keys(byDue)) {
		b, err := json.Marshal(byDue[at])
		if err != nil {
			return nil, err
		}
		jobs, err := retryLapsed(ctx, r, nowUS, func() ([]*store.Job, error) {
			rows, err := r.QueryContext(ctx, rescheduleRowsSQL, at, string(b), nowUS)
			if err != nil {
				return nil, err
			}
			return scanJobs(rows, len(byDue[at]))
		})
		if err != nil {
			return nil, fmt.Errorf("reschedule rate-limited jobs: %w", err)
		}
		for _, j := range jobs {
			out.wake(j.Queue, microTime(at))
		}
		moved = append(moved, jobs...)
	}
	return moved, nil
}

// dropHeldBack discards held-back jobs, decides the children of the workflow jobs among them, and
// returns the jobs as they now are.
func dropHeldBack(ctx context.Context, r txRunner, rowids []int64, nowUS int64, now time.Time, out *outbox) ([]*store.Job, error) {
	b, err := json.Marshal(rowids)
	if err != nil {
		return nil, err
	}
	jobs, err := retryLapsed(ctx, r, nowUS, func() ([]*store.Job, error) {
		rows, err := r.QueryContext(ctx, dropRowsSQL, nowUS, now.Format(time.RFC3339Nano), string(b))
		if err != nil {
			return nil, err
		}
		return scanJobs(rows, len(rowids))
	})
	if err != nil {
		return nil, fmt.Errorf("drop rate-limited jobs: %w", err)
	}
	var finished []string // the workflow jobs dropped
	for _, j := range jobs {
		if j.WorkflowID != "" {
			finished = append(finished, j.ID)
		}
	}
	if len(finished) == 0 {
		return jobs, nil
	}
	return jobs, settleChildren(ctx, r, finished, nowUS, out)
}
