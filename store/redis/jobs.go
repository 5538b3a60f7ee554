package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto/internal/producer"
	"github.com/pronto-jobs/pronto/internal/skewclock"
	"github.com/pronto-jobs/pronto/store"
)

// defaultLimit bounds a maintenance pass when the caller gives no positive limit, and
// defaultListLimit is the ListJobs page size in that case; both match the other stores.
const (
	defaultLimit     = 1000
	defaultListLimit = 100
	// finishChunk bounds the completions of one script call, so that no call holds the server long.
	finishChunk = 256
)

func validInsert(p *store.InsertParams) error {
	if p == nil {
		return fmt.Errorf("redis: insert: nil job: %w", store.ErrInvalidParams)
	}
	switch {
	case p.ID == "":
		return fmt.Errorf("redis: insert: job has no id: %w", store.ErrInvalidParams)
	case p.Kind == "":
		return fmt.Errorf("redis: insert job %s: no kind: %w", p.ID, store.ErrInvalidParams)
	case p.Queue == "":
		return fmt.Errorf("redis: insert job %s: no queue: %w", p.ID, store.ErrInvalidParams)
	}
	switch p.State {
	case store.StateAvailable, store.StateScheduled, store.StatePending:
	default:
		return fmt.Errorf("redis: insert job %s: state %q cannot be inserted (want available, scheduled or pending): %w",
			p.ID, p.State, store.ErrInvalidParams)
	}
	if p.RateLimit != nil && p.RateKey == "" {
		return fmt.Errorf("redis: insert job %s: a rate limit without a rate key: %w", p.ID, store.ErrInvalidParams)
	}
	return nil
}

// nonce returns a random non-zero insert nonce.
func nonce() uint32 {
	for {
		if n := rand.Uint32(); n != 0 {
			return n
		}
	}
}

// byQueue groups indexes of items by queue, keeping the queues in first-seen order.
func byQueue(n int, queueOf func(i int) string) (order []string, groups map[string][]int) {
	groups = make(map[string][]int)
	for i := range n {
		q := queueOf(i)
		if _, ok := groups[q]; !ok {
			order = append(order, q)
		}
		groups[q] = append(groups[q], i)
	}
	return order, groups
}

// Insert writes jobs and announces each queue that got claimable or scheduled jobs.
//
// The ids are first recorded in the global id index, all or none (a duplicate id fails the call
// with store.ErrDuplicate and writes nothing); then each queue's jobs are written by one script,
// the queues' scripts pipelined. A batch within one queue is atomic; a batch spanning several
// queues is atomic per queue (see docs/redis.md).
func (s *Store) Insert(ctx context.Context, params []*store.InsertParams) ([]*store.Job, error) {
	if err := s.checkInsert(params); err != nil {
		return nil, err
	}
	if len(params) == 0 {
		return nil, nil
	}
	return s.insert(ctx, params)
}

func (s *Store) checkInsert(params []*store.InsertParams) error {
	for _, p := range params {
		if err := validInsert(p); err != nil {
			return err
		}
		if err := store.ValidatePlainInsert(p); err != nil {
			return fmt.Errorf("redis: insert: %w", err)
		}
		if p.RateLimit != nil {
			if err := validLimit(*p.RateLimit); err != nil {
				return fmt.Errorf("redis: insert job %s: %w", p.ID, err)
			}
		}
	}
	return nil
}

// insert writes validated jobs (see Insert).
func (s *Store) insert(ctx context.Context, params []*store.InsertParams) ([]*store.Job, error) {
	if len(params) == 1 && !s.cluster() && plainInsert(params[0]) {
		return s.insertOne(ctx, params[0])
	}
	reg := make([]any, 0, 2*len(params))
	seen := make(map[string]struct{}, len(params))
	for _, p := range params {
		if _, dup := seen[p.ID]; dup {
			return nil, fmt.Errorf("redis: insert job %s twice in one batch: %w", p.ID, store.ErrDuplicate)
		}
		seen[p.ID] = struct{}{}
		reg = append(reg, p.ID, p.Queue)
	}
	order, groups := byQueue(len(params), func(i int) string { return params[i].Queue })
	if len(order) == 1 && !s.cluster() {
		return s.insertWhole(ctx, params, order, groups)
	}

	var regCmd *goredis.Cmd
	var queueCmds []*goredis.IntCmd
	err := s.pipelined(ctx, func(pl goredis.Pipeliner, run runScript) error {
		queueCmds = s.registerQueues(ctx, pl, order)
		regCmd = run(scriptRegisterIDs, []string{s.idsKey()}, reg...)
		return nil
	})
	regErr := regCmd.Err()
	if errors.Is(regErr, goredis.Nil) {
		regErr = nil
	}
	if dup := regCmd.Val(); regErr == nil && dup != nil {
		return nil, fmt.Errorf("redis: insert job %v: %w", dup, store.ErrDuplicate)
	}
	if err == nil {
		err = regErr
	}
	if err != nil {
		if !isRedisError(regErr) {
			// The registration ran, or may have with its reply lost: give the ids back, as no job
			// was written, so that a retry of the same batch is not refused as a duplicate.
			s.rdb.HDel(context.WithoutCancel(ctx), s.idsKey(), idsOf(params)...)
		}
		return nil, fmt.Errorf("redis: insert: %w", err)
	}
	// A queue new to a cluster gets the tenant weights before its first jobs (tenant.go).
	if err := s.seedWeights(ctx, newQueues(order, queueCmds)); err != nil {
		s.rdb.HDel(context.WithoutCancel(ctx), s.idsKey(), idsOf(params)...)
		return nil, fmt.Errorf("redis: insert: tenant weights: %w", err)
	}
	// On a cluster the limits the jobs bring are stored in their keys' slots first, once the ids are
	// known not to be duplicates, so that no claim sees the jobs without their limits.
	if err := s.insertLimits(ctx, params); err != nil {
		s.rdb.HDel(context.WithoutCancel(ctx), s.idsKey(), idsOf(params)...)
		return nil, fmt.Errorf("redis: insert: rate limits: %w", err)
	}

	cmds := make([]*goredis.Cmd, len(order))
	err = s.pipelined(ctx, func(pl goredis.Pipeliner, run runScript) error {
		for qi, q := range order {
			cmds[qi] = run(scriptInsert, s.keys(q), s.insertArgs(params, groups[q], 0)...)
		}
		return nil
	})
	if err != nil {
		// Give the ids back, so a retry of the same batch is not refused as a duplicate.
		s.releaseIDs(context.WithoutCancel(ctx), params)
		return nil, fmt.Errorf("redis: insert: %w", err)
	}
	replies := make([][]any, len(order))
	var conflict error
	for qi := range order {
		r, err := cmds[qi].Slice()
		if err != nil {
			conflict = fmt.Errorf("redis: insert: %w", err)
			continue
		}
		replies[qi] = r
		if r[0] == "dup" {
			conflict = fmt.Errorf("redis: insert job %v: %w", r[1], store.ErrDuplicate)
		}
		if r[0] == "uc" {
			key, _ := r[1].(string)
			id, _ := r[2].(string)
			st, _ := r[3].(string)
			conflict = &store.UniqueConflictError{Key: key, ExistingID: id, ExistingState: store.State(st)}
		}
	}
	if conflict != nil {
		// Undo the queues that were written: the batch is refused as a whole.
		bg := context.WithoutCancel(ctx)
		for qi, q := range order {
			if replies[qi] == nil || replies[qi][0] != "ok" {
				continue
			}
			var ids []any
			for _, i := range groups[q] {
				ids = append(ids, params[i].ID)
			}
			scriptPurge.Run(bg, s.rdb, s.keys(q), ids...)
		}
		s.releaseIDs(bg, params)
		if _, ok := conflict.(*store.UniqueConflictError); ok {
			return nil, fmt.Errorf("redis: insert: %w", conflict)
		}
		return nil, conflict
	}
	out, ns, notInserted, err := s.insertResults(params, order, groups, replies)
	if err != nil {
		return nil, err
	}
	if len(notInserted) > 0 {
		if err := s.rdb.HDel(ctx, s.idsKey(), notInserted...).Err(); err != nil {
			return nil, fmt.Errorf("redis: insert: %w", err)
		}
	}
	if err := s.publish(ctx, ns); err != nil {
		return nil, fmt.Errorf("redis: insert: jobs written, announcement failed: %w", err)
	}
	return out, nil
}

// insertArgs returns the ARGV of scriptInsert for the jobs params[idx], with extra room at the end.
func (s *Store) insertArgs(params []*store.InsertParams, idx []int, extra int) []any {
	args := make([]any, 0, 1+len(idx)*48+extra)
	args = append(args, len(idx))
	for _, i := range idx {
		p := params[i]
		f := dropDueNow(insertFields(p, s.cluster()))
		ustates := ""
		if p.UniqueKey != "" {
			ustates = joinStates(store.UniqueStatesOrDefault(p.UniqueStates))
		}
		rl := ""
		if p.RateLimit != nil && !s.cluster() { // a cluster stores it beforehand (insertLimits)
			rl = encodeLimit(*p.RateLimit)
		}
		args = append(args, p.ID, string(p.OnConflict), p.UniqueKey, ustates, string(p.State), p.RateKey, rl, len(f)/2)
		args = append(args, f...)
	}
	return args
}

// dropDueNow removes a sched field of 0 (due now) from a job's fields: scriptInsert then files the
// job as due at the server's now without reading the field back.
func dropDueNow(f []any) []any {
	for i := 0; i+1 < len(f); i += 2 {
		if f[i] == "sched" && f[i+1] == "0" {
			return append(f[:i], f[i+2:]...)
		}
	}
	return f
}

// plainInsert reports whether p is the common job scriptInsertOne writes: available now, with no
// unique key, tenant, rate key, workflow or expiry.
func plainInsert(p *store.InsertParams) bool {
	return p.State == store.StateAvailable && p.ScheduledAt.IsZero() && p.ExpiresAt.IsZero() &&
		p.UniqueKey == "" && p.Tenant == "" && p.RateKey == "" && p.RateLimit == nil &&
		p.WorkflowID == "" && len(p.ParentIDs) == 0 && p.RunOn == ""
}

// insertOne inserts one plain job on a single node (see plainInsert) by scriptInsertOne: one
// round trip, as insertWhole, with a script that reads nothing back. The FCALL is built here in one
// slice (no copy into go-redis's), with the job's fields scriptInsertOne does not write itself.
func (s *Store) insertOne(ctx context.Context, p *store.InsertParams) ([]*store.Job, error) {
	n := nonce()
	cmd := make([]any, 0, 24)
	cmd = append(cmd, "fcall", scriptInsertOne.fname(), "3", s.qkey(p.Queue), s.idsK, s.queuesK,
		p.ID, p.Queue, p.Kind, rankPrio(p.Priority), encodeInsert(p.Queue, n, s.sender), boolFlag(s.subscribed.Load()))
	cmd = plainFields(cmd, p)
	v, err := scriptInsertOne.do(ctx, s.rdb, cmd).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: insert: %w", err)
	}
	nowUS, ok := v.(int64)
	if !ok {
		if r, _ := v.([]any); len(r) == 2 && r[0] == "dup" {
			return nil, fmt.Errorf("redis: insert job %v: %w", r[1], store.ErrDuplicate)
		}
		return nil, fmt.Errorf("redis: insert: unexpected reply %v", v)
	}
	// The script published the announcement to the other processes; this store's own subscribers
	// get it here, unless the script handed the job to a waiting producer (a negative now).
	if nowUS > 0 {
		s.hub.Publish(store.Notification{Kind: store.NotifyInsert, Queue: p.Queue, Nonce: n})
	} else {
		nowUS = -nowUS
	}
	return []*store.Job{newJobFromParams(p, time.UnixMicro(nowUS).UTC())}, nil
}

// rankPrio is the priority part of a job's rank in its claim index: 2^31-1-priority in 10 digits,
// so that lexical order is priority order.
func rankPrio(priority int) string {
	r := int64(math.MaxInt32) - int64(priority)
	if r < 0 || r >= 1e10 {
		return fmt.Sprintf("%010d", r)
	}
	var b [10]byte
	for i := 9; i >= 0; i-- {
		b[i] = byte('0' + r%10)
		r /= 10
	}
	return string(b[:])
}

// insertWhole inserts a batch of one queue on a single node in one call: scriptInsert also checks
// and writes the id index, registers the queue and publishes the announcement (see scripts.go), so
// a single insert is one round trip. The batch is all or nothing.
func (s *Store) insertWhole(ctx context.Context, params []*store.InsertParams, order []string, groups map[string][]int) ([]*store.Job, error) {
	q := order[0]
	n := nonce()
	args := append(s.insertArgs(params, groups[q], 3), q, s.sender, n)
	r, err := scriptInsert.Run(ctx, s.rdb, []string{s.qkey(q), s.idsKey(), s.queuesKey()}, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("redis: insert: %w", err)
	}
	switch r[0] {
	case "dup":
		return nil, fmt.Errorf("redis: insert job %v: %w", r[1], store.ErrDuplicate)
	case "uc":
		key, _ := r[1].(string)
		id, _ := r[2].(string)
		st, _ := r[3].(string)
		return nil, fmt.Errorf("redis: insert: %w", &store.UniqueConflictError{Key: key, ExistingID: id, ExistingState: store.State(st)})
	}
	out, ns, _, err := s.insertResults(params, order, groups, [][]any{r})
	if err != nil {
		return nil, err
	}
	// The script published the insert announcement to the other processes (with this nonce);
	// this store's own subscribers get it here, and the cancels of replaced jobs go out as usual.
	var cancels []store.Notification
	for _, x := range ns {
		if x.Kind == store.NotifyInsert {
			x.Nonce = n
			s.hub.Publish(x)
		} else {
			cancels = append(cancels, x)
		}
	}
	if err := s.publish(ctx, cancels); err != nil {
		return nil, fmt.Errorf("redis: insert: jobs written, announcement failed: %w", err)
	}
	return out, nil
}

// insertResults reads the replies of scriptInsert, one per queue of order: the jobs as inserted
// (or the holders of their unique keys), the notifications to send, and the ids not inserted.
func (s *Store) insertResults(params []*store.InsertParams, order []string, groups map[string][]int, replies [][]any) ([]*store.Job, []store.Notification, []string, error) {
	out := make([]*store.Job, len(params))
	var ns []store.Notification
	var notInserted []string
	for qi, q := range order {
		r := replies[qi]
		nowUS, _ := r[1].(int64)
		now := time.UnixMicro(nowUS).UTC()
		idx := groups[q]
		for _, i := range idx {
			out[i] = newJobFromParams(params[i], now)
		}
		dups, _ := r[2].([]any)
		for _, d := range dups {
			pair, _ := d.([]any)
			x, _ := pair[0].(int64)
			j, err := decodeFlat(pair[1])
			if err != nil || j == nil {
				return nil, nil, nil, fmt.Errorf("redis: insert: reading the job holding a unique key: %v", err)
			}
			j.Duplicate = true
			notInserted = append(notInserted, params[idx[x-1]].ID)
			out[idx[x-1]] = j
		}
		changed, _ := r[3].([]any)
		for _, c := range changed {
			pair, _ := c.([]any)
			x, _ := pair[0].(int64)
			j, err := decodeFlat(pair[1])
			if err != nil || j == nil {
				return nil, nil, nil, fmt.Errorf("redis: insert: reading a job that took over a schedule: %v", err)
			}
			out[idx[x-1]] = j
		}
		// Each job a replacement cancelled is listed on it (store.Job.Replaced); one of this batch
		// (an earlier job holding the key) is returned cancelled, as it is stored.
		replaced, _ := r[5].([]any)
		for _, c := range replaced {
			pair, _ := c.([]any)
			x, _ := pair[0].(int64)
			j, err := decodeFlat(pair[1])
			if err != nil || j == nil {
				return nil, nil, nil, fmt.Errorf("redis: insert: reading a job a unique job replaced: %v", err)
			}
			out[idx[x-1]].Replaced = append(out[idx[x-1]].Replaced, j)
			for _, k := range idx {
				if o := out[k]; o.ID == j.ID && !o.Duplicate {
					o.State, o.CompletedAt = store.StateCancelled, now
				}
			}
		}
		cancels, _ := r[4].([]any)
		for i := 0; i+1 < len(cancels); i += 2 {
			id, _ := cancels[i].(string)
			token, _ := cancels[i+1].(string)
			ns = append(ns, store.Notification{Kind: store.NotifyCancel, Queue: q, JobID: id, ClaimToken: token})
		}
		var due time.Time
		announce, dueNow := false, false
		for _, i := range idx {
			j := out[i]
			if j.Duplicate {
				continue
			}
			switch j.State {
			case store.StateAvailable:
				announce, dueNow = true, true
			case store.StateScheduled, store.StateRetryable:
				announce = true
				if !j.ScheduledAt.After(now) {
					dueNow = true
				} else if due.IsZero() || j.ScheduledAt.Before(due) {
					due = j.ScheduledAt
				}
			}
		}
		if announce {
			if dueNow {
				due = time.Time{}
			}
			ns = append(ns, store.Notification{Kind: store.NotifyInsert, Queue: q, DueAt: due, Nonce: nonce()})
		}
	}
	return out, ns, notInserted, nil
}

// runScript queues a script in a pipeline (see Store.pipelined).
type runScript func(sc *luaFunc, keys []string, args ...any) *goredis.Cmd

// pipelined runs fn's commands in one pipeline, its scripts by FCALL. A script the server did not
// have (a fresh, restarted or failed-over server without the library) did not run; it is run again
// on its own by luaFunc.Run, which loads the library, and its command takes that result. Errors
// the server gave a command are left on the command for the caller; a connection error is
// returned.
func (s *Store) pipelined(ctx context.Context, fn func(pl goredis.Pipeliner, run runScript) error) error {
	type call struct {
		sc   *luaFunc
		keys []string
		args []any
		cmd  *goredis.Cmd
	}
	var calls []call
	_, err := s.rdb.Pipelined(ctx, func(pl goredis.Pipeliner) error {
		return fn(pl, func(sc *luaFunc, keys []string, args ...any) *goredis.Cmd {
			c := sc.call(ctx, pl, keys, args...)
			calls = append(calls, call{sc, keys, args, c})
			return c
		})
	})
	if err != nil && !isRedisError(err) {
		return err
	}
	for _, c := range calls {
		if noFunction(c.cmd.Err()) {
			*c.cmd = *c.sc.Run(ctx, s.rdb, c.keys, c.args...)
		}
	}
	return nil
}

// pipelinedScripts runs fn's scripts in one pipeline (see pipelined) and returns the first error
// one of them gave: for scripts whose replies say nothing beyond success.
func (s *Store) pipelinedScripts(ctx context.Context, fn func(run runScript)) error {
	var cmds []*goredis.Cmd
	err := s.pipelined(ctx, func(_ goredis.Pipeliner, run runScript) error {
		fn(func(sc *luaFunc, keys []string, args ...any) *goredis.Cmd {
			c := run(sc, keys, args...)
			cmds = append(cmds, c)
			return c
		})
		return nil
	})
	if err != nil {
		return err
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return err
		}
	}
	return nil
}

// isRedisError reports whether err is an error reply of the server.
func isRedisError(err error) bool {
	var re goredis.Error
	return errors.As(err, &re)
}

// releaseIDs removes from the id index the ids of params whose job is not stored, after an insert
// that failed part-way. A job stored all the same (a queue's script ran and its reply was lost, or it
// met a job of the same id, see scriptInsert) keeps its entry, so that it is found by id and a
// retry is told it exists. When the jobs cannot be read, every id goes.
func (s *Store) releaseIDs(ctx context.Context, params []*store.InsertParams) {
	exists := make([]*goredis.IntCmd, len(params))
	_, err := s.rdb.Pipelined(ctx, func(pl goredis.Pipeliner) error {
		for i, p := range params {
			exists[i] = pl.Exists(ctx, s.jobKey(p.Queue, p.ID))
		}
		return nil
	})
	ids := make([]string, 0, len(params))
	for i, p := range params {
		if err != nil || exists[i].Val() == 0 {
			ids = append(ids, p.ID)
		}
	}
	if len(ids) > 0 {
		s.rdb.HDel(ctx, s.idsKey(), ids...)
	}
}

func idsOf(params []*store.InsertParams) []string {
	out := make([]string, len(params))
	for i, p := range params {
		out[i] = p.ID
	}
	return out
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// Claim moves up to p.Limit claimable jobs of p.Queue to active in one script call and returns
// them in claim order, each with a fresh random claim token. With p.WorkerIDs it claims up to one
// job per entry, the n-th job for the n-th entry.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) ([]*store.Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(p.WorkerIDs) > 0 {
		p.Limit, p.WorkerID = len(p.WorkerIDs), ""
	}
	if p.Limit <= 0 {
		return nil, nil
	}
	var w *waiter
	if len(p.WorkerIDs) == 0 && s.handoffOn() && producer.InLoop(ctx) {
		p.Kinds = sortedKinds(p.Kinds)
		if w = s.waiterFor(&p, p.Kinds); w != nil {
			// Jobs handed to this producer by inserts (handoff.go): no round trip.
			if jobs := w.take(p.Limit); len(jobs) > 0 {
				return jobs, nil
			}
		}
	}
	if s.cluster() {
		return s.claimCluster(ctx, p)
	}
	if w == nil {
		return s.claim(ctx, p, nil)
	}
	if step := handoffStep.Load(); step != nil {
		(*step)(w, "claim")
	}
	jobs, err := s.claim(ctx, p, w)
	w.afterClaim()
	return jobs, err
}

// claim runs the claim script on a single node; with w, it advertises w's producer as waiting when
// slots stay free (handoff.go).
func (s *Store) claim(ctx context.Context, p store.ClaimParams, w *waiter) ([]*store.Job, error) {
	jobs, _, limited, err := s.claimOnce(ctx, p, "1", w)
	if err != nil {
		return nil, fmt.Errorf("redis: claim from %s: %w", p.Queue, err)
	}
	p.ReportLimited(limited)
	return jobs, nil
}

// claimOnce runs the claim script once with flag (see claimBody's global) and returns the jobs it
// claimed, on a cluster the rate keys it stopped for (ratelimit.go), and the rate keys whose limit had
// no room for a job it would have taken (store.ClaimParams.OnLimited; on a cluster with their key
// only, which the caller completes from its permits). It reports the jobs it held back itself.
func (s *Store) claimOnce(ctx context.Context, p store.ClaimParams, flag string, w *waiter) ([]*store.Job, []need, []store.LimitHit, error) {
	kinds := sortedKinds(p.Kinds)
	args := make([]any, 0, 5+len(kinds)+p.Limit+len(p.WorkerIDs))
	args = append(args, p.Limit, p.WorkerID, p.LeaseDuration.Microseconds(), len(kinds))
	for _, k := range kinds {
		args = append(args, k)
	}
	toks := tokens(p.Limit)
	for _, t := range toks {
		args = append(args, t)
	}
	if p.OnLimited != nil {
		flag = "l" + flag // the script gathers the limited keys only when asked (see claimBody)
	}
	args = append(args, flag)
	for _, w := range p.WorkerIDs {
		args = append(args, w)
	}
	if w != nil {
		args = append(args, w.adArgs()...)
	}
	res, err := scriptClaim.Run(ctx, s.rdb, s.keys(p.Queue), args...).Slice()
	if err != nil {
		s.lostClaimOf(&p, toks, err)
		return nil, nil, nil, err
	}
	var needs []need
	if n := len(res); n > 0 {
		if last, _ := res[n-1].([]any); len(last) > 0 && last[0] == "\nneed" {
			needs, res = parseNeed(last), res[:n-1]
		}
	}
	if n := len(res); n > 0 {
		if last, _ := res[n-1].([]any); len(last) > 0 && last[0] == relayMarker {
			res = res[:n-1]
			// Jobs of split workflows the claim dropped (their rate key's limit says so): their
			// children in other queues are told now (relay.go).
			if err := s.deliver(ctx, p.Queue, strs(last[1:])); err != nil {
				s.logf("redis: claim: %v", err)
			}
		}
	}
	var dropped, rescheduled []*store.Job
	var limited []store.LimitHit
	if n := len(res); n > 0 {
		if last, _ := res[n-1].([]any); len(last) > 0 && last[0] == heldMarker {
			res = res[:n-1]
			// The jobs the claim dropped or rescheduled for their rate limit (claimplain).
			for _, e := range last[1:] {
				flat, _ := e.([]any)
				if len(flat) == 0 {
					continue
				}
				j, err := decodeFlat(flat[1:])
				if err != nil {
					s.lostClaimOf(&p, toks, err) // the claim ran: return its jobs
					return nil, nil, nil, err
				}
				if flat[0] == "d" {
					dropped = append(dropped, j)
				} else {
					rescheduled = append(rescheduled, j)
				}
			}
		}
	}
	if n := len(res); n > 0 {
		// Only a claim that asked for them (p.OnLimited) gets the limited keys.
		if last, _ := res[n-1].([]any); len(last) > 0 && last[0] == limitedMarker {
			res = res[:n-1]
			limited = parseLimited(last)
		}
	}
	out := make([]*store.Job, 0, len(res))
	for _, v := range res {
		j, err := decodeFlat(v)
		if err != nil {
			s.lostClaimOf(&p, toks, err)
			return nil, nil, nil, err
		}
		out = append(out, j)
	}
	s.remember(out)
	p.ReportHeldBack(dropped, rescheduled)
	return out, needs, limited, nil
}

// limitedMarker opens the entry of a claim's reply that lists the rate keys whose limit had no room
// (limhits in the scripts' prelude).
const limitedMarker = "\nlimited"

// parseLimited reads the claim script's {"\nlimited", key, max, rate, period, count, active, room,
// ...} entry; a key whose numbers are "" (a Redis Cluster) comes with its Key only.
func parseLimited(v []any) []store.LimitHit {
	var hits []store.LimitHit
	for i := 1; i+6 < len(v); i += 7 {
		key := fmt.Sprint(v[i])
		if fmt.Sprint(v[i+6]) == "r" {
			hits = append(hits, store.LimitHit{Key: key, HasRoom: true})
			continue
		}
		if fmt.Sprint(v[i+1]) == "" {
			hits = append(hits, store.LimitHit{Key: key})
			continue
		}
		var n [5]int64
		for x := range n {
			n[x], _ = strconv.ParseInt(fmt.Sprint(v[i+1+x]), 10, 64)
		}
		l := store.RateLimit{MaxActive: int(n[0]), Rate: int(n[1]), Period: time.Duration(n[2]) * time.Microsecond}
		hits = append(hits, store.NewLimitHit(key, l, n[4], n[3]))
	}
	return hits
}

// heldMarker opens the entry of a claim's reply that lists the jobs it held back (heldback in the
// scripts' prelude).
const heldMarker = "\nheld"

// queuesOf looks the queues of ids up in the global id index; "" for an id the index does not
// hold.
func (s *Store) queuesOf(ctx context.Context, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	out := make([]string, len(ids))
	all := make([]int, len(ids))
	for i := range all {
		all[i] = i
	}
	if err := s.indexQueues(ctx, ids, all, out); err != nil {
		return nil, err
	}
	return out, nil
}

// hintedQueuesOf looks the queues of ids up: in the cache of the jobs this store claimed, else in
// the global id index; hinted[i] says the queue of ids[i] came from the cache, which may be stale
// (see claimCache).
func (s *Store) hintedQueuesOf(ctx context.Context, ids []string) (queues []string, hinted []bool, err error) {
	if len(ids) == 0 {
		return nil, nil, nil
	}
	queues = make([]string, len(ids))
	hinted = make([]bool, len(ids))
	miss := s.claims.lookup(ids, queues)
	for i := range hinted {
		hinted[i] = true
	}
	for _, i := range miss {
		hinted[i] = false
	}
	if len(miss) > 0 {
		if err := s.indexQueues(ctx, ids, miss, queues); err != nil {
			return nil, nil, err
		}
	}
	return queues, hinted, nil
}

// indexQueues sets out[i] to the queue the id index holds for ids[i] ("" for none), for each i of
// at.
func (s *Store) indexQueues(ctx context.Context, ids []string, at []int, out []string) error {
	fields := make([]string, len(at))
	for k, i := range at {
		fields[k] = ids[i]
	}
	vals, err := s.rdb.HMGet(ctx, s.idsKey(), fields...).Result()
	if err != nil {
		return err
	}
	for k, v := range vals {
		out[at[k]], _ = v.(string)
	}
	return nil
}

// recheck is called with the indexes of ids whose cached queue (see claimCache) did not hold them
// as the caller needed: it drops their cache entries, looks them up in the id index, updates
// queues, and returns the indexes whose queue changed, for the caller to try once more there. A
// job found where the cache said needs nothing more: the script's answer stands.
func (s *Store) recheck(ctx context.Context, ids, queues []string, at []int) ([]int, error) {
	stale := make([]string, len(at))
	for k, i := range at {
		stale[k] = ids[i]
	}
	s.claims.forget(stale...)
	found := make([]string, len(ids))
	if err := s.indexQueues(ctx, ids, at, found); err != nil {
		return nil, err
	}
	var again []int
	for _, i := range at {
		if found[i] != "" && found[i] != queues[i] {
			queues[i] = found[i]
			again = append(again, i)
		}
	}
	return again, nil
}

// remember records the queues of jobs this store claimed, so that their outcomes and heartbeats
// usually skip the id index.
func (s *Store) remember(jobs []*store.Job) { s.claims.add(jobs) }

// queueOf looks up the queue of one job, giving store.ErrNotFound when the index has none.
func (s *Store) queueOf(ctx context.Context, id string) (string, error) {
	q, err := s.rdb.HGet(ctx, s.idsKey(), id).Result()
	if errors.Is(err, goredis.Nil) {
		return "", notFound(id)
	}
	if err != nil {
		return "", fmt.Errorf("redis: job %s: %w", id, err)
	}
	return q, nil
}

func notFound(id string) error { return fmt.Errorf("redis: job %s: %w", id, store.ErrNotFound) }

// Finish applies completions, one script call per queue and up to finishChunk completions each,
// all pipelined, and announces the queues of the jobs it made claimable or scheduled.
//
// The queue of a job this store claimed comes from its cache, without a round trip; a completion
// the script of that queue did not apply is looked up in the id index and, if the job is in
// another queue now (its id reused after the claimed job went), tried once more there.
//
// The calls of one Finish are not one transaction: one queue's may fail (a full Redis) after
// another's were written. Finish then does what follows the written outcomes and returns a
// *store.FinishPartialError with their results, so that a caller retries only the others: the
// script applies a completion once (it clears the claim token), so an outcome written and sent
// again would be reported not applied. An announcement that fails after every outcome is known is
// such an error too, with every result known.
func (s *Store) Finish(ctx context.Context, completions []store.Completion) ([]store.FinishResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, c := range completions {
		if !c.State.Finishable() {
			return nil, fmt.Errorf("redis: finish job %s: cannot move an active job to state %q: %w", c.ID, c.State, store.ErrInvalidParams)
		}
	}
	res := make([]store.FinishResult, len(completions))
	ids := make([]string, len(completions))
	for i, c := range completions {
		res[i].ID = c.ID
		ids[i] = c.ID
	}
	queues, hinted, err := s.hintedQueuesOf(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("redis: finish: %w", err)
	}
	f := &finishing{s: s, cs: completions, res: res, known: make([]bool, len(completions)), queues: queues, now: time.Now()}
	if dueLater(completions) {
		if f.offset, err = s.serverOffset(ctx); err != nil {
			return nil, fmt.Errorf("redis: finish: %w", err)
		}
	}
	all := make([]int, len(completions))
	for i := range all {
		all[i] = i
	}
	err = f.apply(ctx, all)
	var missed []int
	for i := range completions {
		if hinted[i] && f.known[i] && !res[i].Applied {
			missed = append(missed, i)
		}
	}
	if len(missed) > 0 {
		again, rerr := s.recheck(ctx, ids, queues, missed)
		if rerr != nil {
			for _, i := range missed {
				f.known[i] = false // perhaps in another queue now
			}
		} else if len(again) > 0 {
			rerr = f.apply(ctx, again)
		}
		if err == nil {
			err = rerr
		}
	}
	for i, id := range ids {
		if f.known[i] {
			s.claims.forget(id)
		}
	}
	if err != nil {
		f.settleAfter(ctx)
		return nil, f.failed(fmt.Errorf("redis: finish: %w", err))
	}
	if err := f.settle(ctx); err != nil {
		return nil, f.failed(err)
	}
	return res, nil
}

// finishing gathers what Finish's script calls report, over its tries, for settle.
type finishing struct {
	s      *Store
	cs     []store.Completion
	res    []store.FinishResult
	known  []bool   // per completion: res holds its result (its call answered)
	queues []string // the queue of each completion's job ("" for none)
	now    time.Time
	// offset is the server's clock minus this process's (serverOffset), read when a completion
	// is due later: its ScheduledAt, of this process's clock, is sent as the server's.
	offset time.Duration

	ns      []store.Notification
	freed   map[string][]any // on a cluster: the permits to give back, by rate key (ratelimit.go)
	relays  []relayed        // outbox entries the outcomes wrote, to deliver (relay.go)
	removed []string         // the jobs removed (store.Completion.Remove), to drop from the id index
}

// announce notes q to be announced, due at due (zero: claimable now).
func (f *finishing) announce(q string, due time.Time) {
	for i := range f.ns {
		if f.ns[i].Queue == q {
			if !f.ns[i].DueAt.IsZero() && (due.IsZero() || due.Before(f.ns[i].DueAt)) {
				f.ns[i].DueAt = due
			}
			return
		}
	}
	f.ns = append(f.ns, store.Notification{Kind: store.NotifyInsert, Queue: q, DueAt: due, Nonce: nonce()})
}

// failed returns err, of a Finish that failed, as a *store.FinishPartialError when some results
// are known.
func (f *finishing) failed(err error) error {
	if slices.Contains(f.known, true) {
		return &store.FinishPartialError{Results: f.res, Known: f.known, Err: err}
	}
	return err
}

// apply runs the finish script for the completions at idx, grouped by their queue, and records
// their outcomes and which are known: those of every call that answered, also when another
// failed, whose first error it returns.
func (f *finishing) apply(ctx context.Context, idx []int) error {
	for _, i := range idx {
		f.known[i] = f.queues[i] == "" // an unknown id: not applied
	}
	order, groups := byQueue(len(idx), func(k int) string { return f.queues[idx[k]] })
	type call struct {
		idx []int
		cmd *goredis.Cmd
	}
	var calls []call
	err := f.s.pipelined(ctx, func(pl goredis.Pipeliner, run runScript) error {
		for _, q := range order {
			if q == "" {
				continue // unknown ids: not applied
			}
			var all []int
			for _, k := range groups[q] {
				all = append(all, idx[k])
			}
			for len(all) > 0 {
				chunk := all[:min(len(all), finishChunk)]
				all = all[len(chunk):]
				args := make([]any, 0, 1+8*len(chunk))
				args = append(args, len(chunk))
				for _, i := range chunk {
					c := &f.cs[i]
					errJSON := ""
					if c.Error != nil {
						b, err := json.Marshal(c.Error)
						if err != nil {
							return fmt.Errorf("job %s: error entry: %w: %w", c.ID, store.ErrInvalidParams, err)
						}
						errJSON = string(b)
					}
					flags, result := "", ""
					if c.Result != nil {
						flags, result = "v", string(c.Result)
					}
					if c.RefundAttempt {
						flags += "r"
					}
					if c.Remove {
						flags += "x"
					}
					sched := "0"
					if c.State == store.StateRetryable || c.State == store.StateScheduled {
						sched = micros(c.ScheduledAt)
						if !c.ScheduledAt.IsZero() {
							sched = micros(c.ScheduledAt.Add(f.offset))
						}
					}
					args = append(args, c.ID, strconv.Itoa(c.Attempt), c.Token, string(c.State), sched, errJSON, flags, result)
				}
				calls = append(calls, call{idx: chunk, cmd: run(scriptFinish, f.s.keys(q), args...)})
			}
		}
		return nil
	})
	// A pipeline that failed may still have run some calls (a connection lost part-way): each
	// call's own reply says whether it did.
	first := err
	for _, cl := range calls {
		reply, err := cl.cmd.Slice()
		if err == nil && len(reply) < len(cl.idx) {
			err = fmt.Errorf("%d outcomes for %d completions", len(reply), len(cl.idx))
		}
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		for _, i := range cl.idx {
			f.known[i] = true
		}
		applied := make([]int64, len(cl.idx))
		for k := range cl.idx {
			applied[k], _ = reply[k].(int64)
		}
		r := len(cl.idx)
		for ; r+1 < len(reply); r += 2 {
			if m, ok := reply[r].(string); ok && m == relayMarker {
				break
			}
			k, _ := reply[r].(int64)
			key, _ := reply[r+1].(string)
			if k < 1 || int(k) > len(cl.idx) {
				continue
			}
			c := &f.cs[cl.idx[k-1]]
			if f.freed == nil {
				f.freed = map[string][]any{}
			}
			f.freed[key] = append(f.freed[key], ledgerEntry(c.ID, c.Attempt))
		}
		if r < len(reply) && reply[r] == relayMarker {
			q := f.queues[cl.idx[0]]
			f.relays = append(f.relays, relayed{q, strs(reply[r+1:])})
		}
		for k, i := range cl.idx {
			if applied[k] == 0 {
				continue
			}
			f.res[i].Applied = true
			c := &f.cs[i]
			if applied[k]&4 != 0 {
				f.removed = append(f.removed, c.ID)
				applied[k] &^= 4
			}
			if applied[k] >= 2 && c.State != store.StateAvailable {
				f.announce(f.queues[i], time.Time{}) // a slot of its rate key or tenant's limit is free
			}
			switch c.State {
			case store.StateAvailable:
				f.announce(f.queues[i], time.Time{})
			case store.StateRetryable, store.StateScheduled:
				// Announced on the server's clock, as the job is due (f.offset: zero unless this
				// process's clock is off by more than the tolerance).
				due := c.ScheduledAt.Add(f.offset)
				if !due.After(f.now.Add(f.offset)) {
					due = time.Time{}
				}
				f.announce(f.queues[i], due)
			}
		}
	}
	return first
}

// settleAfter is settle for a Finish that fails: the outcomes that were written still drop their
// removed jobs, deliver their outbox entries, give their permits back and announce their queues,
// rather than wait for the retry (which may not come) or the maintenance passes. Its own error is
// logged: the caller returns the first one.
func (f *finishing) settleAfter(ctx context.Context) {
	if err := f.settle(ctx); err != nil {
		f.s.logf("%v", err)
	}
}

// settle does what follows the written outcomes: drops removed jobs from the id index, delivers
// the outbox entries, gives permits back and announces the queues.
func (f *finishing) settle(ctx context.Context) error {
	s := f.s
	if len(f.removed) > 0 {
		if err := s.rdb.HDel(ctx, s.idsKey(), f.removed...).Err(); err != nil {
			// The jobs are gone; a stale entry of the index points to no job, which readers
			// take as not found, as after an interrupted Cleanup.
			s.logf("redis: finish: dropping removed jobs from the id index: %v", err)
		}
	}
	for _, r := range f.relays {
		if err := s.deliver(ctx, r.queue, r.entries); err != nil {
			// The outcomes are written; Rescue relays what is left.
			s.logf("redis: finish: %v", err)
		}
	}
	if err := s.releasePermits(ctx, f.freed); err != nil {
		// The outcomes are written; the entries are dropped by the next check of their keys'
		// ledgers (ratelimit.go).
		s.logf("redis: finish: giving back rate-limit permits: %v", err)
	}
	if err := s.publish(ctx, f.ns); err != nil {
		return fmt.Errorf("redis: finish: outcomes written, announcement failed: %w", err)
	}
	return nil
}

// Heartbeat extends the leases of the listed jobs held by p.WorkerID (under p.Tokens, when given)
// and returns the others. As Finish, it takes the queue of a job this store claimed from its cache
// and checks a job the cached queue did not hold in the id index.
func (s *Store) Heartbeat(ctx context.Context, p store.HeartbeatParams) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	queues, hinted, err := s.hintedQueuesOf(ctx, p.IDs)
	if err != nil {
		return nil, fmt.Errorf("redis: heartbeat: %w", err)
	}
	all := make([]int, len(p.IDs))
	for i := range all {
		all[i] = i
	}
	lost, err := s.heartbeat(ctx, p, queues, all)
	if err != nil || len(lost) == 0 {
		return nil, err
	}
	var missed []int
	for i := range p.IDs {
		if lost[i] && hinted[i] {
			missed = append(missed, i)
		}
	}
	if len(missed) > 0 {
		again, err := s.recheck(ctx, p.IDs, queues, missed)
		if err != nil {
			return nil, fmt.Errorf("redis: heartbeat: %w", err)
		}
		if len(again) > 0 {
			still, err := s.heartbeat(ctx, p, queues, again)
			if err != nil {
				return nil, err
			}
			for _, i := range again {
				lost[i] = still[i]
			}
		}
	}
	var out, gone []string
	for i, id := range p.IDs {
		if lost[i] {
			out = append(out, id)
			if hinted[i] {
				gone = append(gone, id)
			}
		}
	}
	s.claims.forget(gone...)
	return out, nil
}

// heartbeat runs the heartbeat script for the jobs of p at idx, grouped by their queue, and returns
// which of them (by index in p.IDs) are lost; nil when none is.
func (s *Store) heartbeat(ctx context.Context, p store.HeartbeatParams, queues []string, idx []int) (map[int]bool, error) {
	var lost map[int]bool
	mark := func(i int) {
		if lost == nil {
			lost = make(map[int]bool)
		}
		lost[i] = true
	}
	order, groups := byQueue(len(idx), func(k int) string { return queues[idx[k]] })
	type call struct {
		at  map[string][]int // the indexes in p.IDs of each id sent
		cmd *goredis.Cmd
	}
	var calls []call
	err := s.pipelined(ctx, func(pl goredis.Pipeliner, run runScript) error {
		for _, q := range order {
			if q == "" {
				for _, k := range groups[q] {
					mark(idx[k])
				}
				continue
			}
			args := []any{p.WorkerID, p.LeaseDuration.Microseconds()}
			at := make(map[string][]int, len(groups[q]))
			for _, k := range groups[q] {
				i := idx[k]
				tok := ""
				if i < len(p.Tokens) {
					tok = p.Tokens[i]
				}
				args = append(args, p.IDs[i], tok)
				at[p.IDs[i]] = append(at[p.IDs[i]], i)
			}
			calls = append(calls, call{at: at, cmd: run(scriptHeartbeat, s.keys(q), args...)})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redis: heartbeat: %w", err)
	}
	for _, c := range calls {
		l, err := c.cmd.StringSlice()
		if err != nil {
			return nil, fmt.Errorf("redis: heartbeat: %w", err)
		}
		for _, id := range l {
			for _, i := range c.at[id] {
				mark(i)
			}
		}
	}
	return lost, nil
}

// queues returns every queue the registry holds, sorted.
func (s *Store) queues(ctx context.Context) ([]string, error) {
	qs, err := s.rdb.SMembers(ctx, s.queuesKey()).Result()
	if err != nil {
		return nil, err
	}
	sort.Strings(qs)
	return qs, nil
}

// Rescue takes back up to p.Limit active jobs whose lease ran out, queue by queue.
func (s *Store) Rescue(ctx context.Context, p store.RescueParams) (store.RescueResult, error) {
	var res store.RescueResult
	limit := p.Limit
	if limit <= 0 {
		limit = defaultLimit
	}
	qs, err := s.queues(ctx)
	if err != nil {
		return res, fmt.Errorf("redis: rescue: %w", err)
	}
	var ns []store.Notification
	for _, q := range qs {
		left := limit - len(res.Requeued) - len(res.Discarded)
		if left <= 0 {
			break
		}
		out, err := scriptRescue.Run(ctx, s.rdb, s.keys(q), left).Slice()
		if err != nil {
			return res, fmt.Errorf("redis: rescue %s: %w", q, err)
		}
		req, _ := out[0].([]any)
		dis, _ := out[1].([]any)
		released, _ := out[2].(int64)
		// A job is nil only if its hash vanished (an evicting maxmemory policy): the script skips
		// those, and a result never names a job it cannot describe.
		for _, v := range req {
			j, err := decodeFlat(v)
			if err != nil {
				return res, err
			}
			if j != nil {
				res.Requeued = append(res.Requeued, j)
			}
		}
		for _, v := range dis {
			j, err := decodeFlat(v)
			if err != nil {
				return res, err
			}
			if j != nil {
				res.Discarded = append(res.Discarded, j)
			}
		}
		if len(req) > 0 || released >= 1 {
			ns = append(ns, store.Notification{Kind: store.NotifyInsert, Queue: q, Nonce: nonce()})
		}
	}
	if s.cluster() {
		// Outcomes of split workflows' jobs left in their queues' outboxes (rescued just now, or
		// written by a process that died before relaying them) reach the other queues (relay.go).
		if err := s.relayAll(ctx); err != nil {
			return res, fmt.Errorf("redis: rescue: %w", err)
		}
		// The permits of rate-limited jobs that left active without Finish (rescued just now,
		// cancelled or deleted while running) come back (ratelimit.go).
		if err := s.reconcileLapsed(ctx); err != nil {
			return res, fmt.Errorf("redis: rescue: rate-limit ledgers: %w", err)
		}
	}
	return res, s.publish(ctx, ns)
}

// eachQueue runs a counting script on every queue until limit is reached, announcing the queues
// the script asks to (its reply is {count, 1 to announce the queue, 2 to announce it and relay its
// workflow outbox (relay.go)}).
func (s *Store) eachQueue(ctx context.Context, what string, sc *luaFunc, limit int) (int, error) {
	if limit <= 0 {
		limit = defaultLimit
	}
	qs, err := s.queues(ctx)
	if err != nil {
		return 0, fmt.Errorf("redis: %s: %w", what, err)
	}
	n := 0
	var ns []store.Notification
	for _, q := range qs {
		if n >= limit {
			break
		}
		r, err := sc.Run(ctx, s.rdb, s.keys(q), limit-n).Int64Slice()
		if err != nil {
			return n, fmt.Errorf("redis: %s %s: %w", what, q, err)
		}
		if len(r) != 2 {
			return n, fmt.Errorf("redis: %s %s: unexpected reply %v", what, q, r)
		}
		n += int(r[0])
		if r[1] >= 1 {
			ns = append(ns, store.Notification{Kind: store.NotifyInsert, Queue: q, Nonce: nonce()})
		}
		if r[1] == 2 {
			if err := s.relay(ctx, q); err != nil {
				return n, fmt.Errorf("redis: %s: %w", what, err)
			}
		}
	}
	return n, s.publish(ctx, ns)
}

// Promote moves up to limit due scheduled and retryable jobs to available and announces their
// queues.
func (s *Store) Promote(ctx context.Context, limit int) (int, error) {
	return s.eachQueue(ctx, "promote", scriptPromote, limit)
}

// DiscardExpired discards up to limit not-started jobs whose expiry has passed, returns them, and
// announces the queues where that released workflow children (failure callbacks).
func (s *Store) DiscardExpired(ctx context.Context, limit int) ([]*store.Job, error) {
	if limit <= 0 {
		limit = defaultLimit
	}
	qs, err := s.queues(ctx)
	if err != nil {
		return nil, fmt.Errorf("redis: discard expired: %w", err)
	}
	var jobs []*store.Job
	var ns []store.Notification
	for _, q := range qs {
		if len(jobs) >= limit {
			break
		}
		out, err := scriptExpire.Run(ctx, s.rdb, s.keys(q), limit-len(jobs)).Slice()
		if err != nil {
			return jobs, fmt.Errorf("redis: discard expired %s: %w", q, err)
		}
		if len(out) != 2 {
			return jobs, fmt.Errorf("redis: discard expired %s: unexpected reply %v", q, out)
		}
		gone, _ := out[0].([]any)
		for _, v := range gone {
			j, err := decodeFlat(v)
			if err != nil {
				return jobs, err
			}
			if j != nil { // see Rescue
				jobs = append(jobs, j)
			}
		}
		flag, _ := out[1].(int64)
		if flag >= 1 {
			ns = append(ns, store.Notification{Kind: store.NotifyInsert, Queue: q, Nonce: nonce()})
		}
		if flag == 2 {
			if err := s.relay(ctx, q); err != nil {
				return jobs, fmt.Errorf("redis: discard expired: %w", err)
			}
		}
	}
	return jobs, s.publish(ctx, ns)
}

// NextDue returns the earliest due time of queue's scheduled and retryable jobs or, when sooner,
// the end of the window of an exhausted rate key with jobs available in queue.
func (s *Store) NextDue(ctx context.Context, queue string) (time.Time, bool, error) {
	if s.cluster() {
		t, ok, err := s.nextDueCluster(ctx, queue)
		if err != nil {
			return time.Time{}, false, fmt.Errorf("redis: next due of %s: %w", queue, err)
		}
		return t, ok, nil
	}
	v, err := scriptNextDue.Run(ctx, s.rdb, s.keys(queue)).Text()
	if errors.Is(err, goredis.Nil) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("redis: next due of %s: %w", queue, err)
	}
	return fromMicros(v), true, nil
}

// Cleanup deletes up to p.Limit terminal jobs that finished before their state's cut-off.
func (s *Store) Cleanup(ctx context.Context, p store.CleanupParams) (int, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = defaultLimit
	}
	// The maintenance pass over every queue also repairs the queues' copies of the tenant weights on
	// a cluster (tenant.go) and sweeps the workflow registrations; the passes of the queues with a
	// retention of their own (p.Queues) come before it and leave that to it.
	whole := len(p.Queues) == 0
	if whole {
		if err := s.syncWeights(ctx); err != nil {
			return 0, fmt.Errorf("redis: cleanup: tenant weights: %w", err)
		}
	}
	if p.CompletedBefore.IsZero() && p.CancelledBefore.IsZero() && p.DiscardedBefore.IsZero() {
		return 0, ctx.Err()
	}
	if whole {
		if err := s.sweepRegistrations(ctx); err != nil {
			return 0, fmt.Errorf("redis: cleanup: workflow registrations: %w", err)
		}
	}
	qs, err := s.queues(ctx)
	if err != nil {
		return 0, fmt.Errorf("redis: cleanup: %w", err)
	}
	n := 0
	for _, q := range qs {
		if n >= limit {
			break
		}
		if !p.Cleans(q) {
			continue
		}
		gone, err := s.deleted(ctx, scriptCleanup.Run(ctx, s.rdb, s.keys(q),
			micros(p.CompletedBefore), micros(p.CancelledBefore), micros(p.DiscardedBefore), limit-n))
		if err != nil {
			return n, fmt.Errorf("redis: cleanup %s: %w", q, err)
		}
		n += len(gone)
	}
	return n, nil
}

// GetJob returns one job, or an error matching store.ErrNotFound.
func (s *Store) GetJob(ctx context.Context, id string) (*store.Job, error) {
	q, err := s.queueOf(ctx, id)
	if err != nil {
		return nil, err
	}
	m, err := s.rdb.HGetAll(ctx, s.jobKey(q, id)).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: job %s: %w", id, err)
	}
	j, err := decodeJob(m)
	if err != nil {
		return nil, err
	}
	if j == nil {
		return nil, notFound(id)
	}
	return j, nil
}

// ListJobs returns one page of jobs in id order that match p's filters and the next page's cursor.
//
// Every queue keeps a sorted set of ids per state, so a page is a merge of lexical range reads
// (ZRANGE BYLEX from the cursor) over the queues and states asked for: no scan of whole sets. Kind
// and tag filters are applied to the jobs read, reading on until the page is full. A tenant's jobs are
// read from its own sets per state (on a Redis Cluster, its sets per queue and state, merged), so a
// small tenant's page reads none of a large tenant's jobs.
func (s *Store) ListJobs(ctx context.Context, p store.ListParams) ([]*store.Job, string, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	clusterTenant := p.Tenant != "" && s.cluster()
	queues := p.Queues
	if len(queues) == 0 && (clusterTenant || p.Tenant == "" && p.WorkflowID == "") {
		var err error
		if queues, err = s.queues(ctx); err != nil {
			return nil, "", fmt.Errorf("redis: list jobs: %w", err)
		}
	}
	states := p.States
	if len(states) == 0 {
		states = store.AllStates
	}
	type source struct{ queue, key string }
	var srcs []source
	byID := !clusterTenant && (p.Tenant != "" || p.WorkflowID != "") // sources without a queue: looked up per job
	switch {
	case clusterTenant:
		// The tenant's ids per queue and state (tjs:<state>:<tenant> in each queue, see scripts.go);
		// a workflow filter then applies per job.
		for _, q := range slices.Compact(slices.Sorted(slices.Values(queues))) {
			for _, st := range slices.Compact(slices.Sorted(slices.Values(states))) {
				srcs = append(srcs, source{q, s.qkey(q) + "tjs:" + string(st) + ":" + p.Tenant})
			}
		}
	case p.Tenant != "":
		// The tenant's own ids per state (tj:<state>:<tenant>, see scripts.go) rather than every
		// queue's; a workflow filter then applies per job.
		for _, st := range slices.Compact(slices.Sorted(slices.Values(states))) {
			srcs = append(srcs, source{"", s.prefix + "tj:" + string(st) + ":" + p.Tenant})
		}
	case p.WorkflowID != "":
		// A workflow's own ids (queue looked up per job) rather than every queue's.
		bases, wq, err := s.workflowBases(ctx, []string{p.WorkflowID})
		if err != nil {
			return nil, "", fmt.Errorf("redis: list jobs: %w", err)
		}
		srcs = []source{{"", bases[0] + "wfj:" + p.WorkflowID}}
		if parts := splitQueues(wq[0]); parts != nil {
			// A split workflow's parts, each of its queue's jobs (relay.go).
			srcs = srcs[:0]
			for _, q := range parts {
				srcs = append(srcs, source{q, s.qkey(q) + "wfj:" + p.WorkflowID})
			}
		}
	default:
		for _, q := range slices.Compact(slices.Sorted(slices.Values(queues))) {
			for _, st := range states {
				srcs = append(srcs, source{q, s.qkey(q) + "st:" + string(st)})
			}
		}
	}
	// The page starts at the cursor and stops at the other end of p's id window.
	lower, upper := p.IDWindow()
	cursor := lower
	if p.Descending {
		cursor = upper
	}
	var out []*store.Job
	for {
		want := limit + 1 - len(out)
		cmds := make([]*goredis.StringSliceCmd, len(srcs))
		_, err := s.rdb.Pipelined(ctx, func(pl goredis.Pipeliner) error {
			for i, src := range srcs {
				var args []any
				if p.Descending {
					hi, lo := "+", "-"
					if cursor != "" {
						hi = "(" + cursor
					}
					if lower != "" {
						lo = "(" + lower
					}
					args = []any{"ZRANGE", src.key, hi, lo, "BYLEX", "REV", "LIMIT", 0, want}
				} else {
					lo, hi := "-", "+"
					if cursor != "" {
						lo = "(" + cursor
					}
					if upper != "" {
						hi = "(" + upper
					}
					args = []any{"ZRANGE", src.key, lo, hi, "BYLEX", "LIMIT", 0, want}
				}
				cmd := goredis.NewStringSliceCmd(ctx, args...)
				_ = pl.Process(ctx, cmd)
				cmds[i] = cmd
			}
			return nil
		})
		if err != nil {
			return nil, "", fmt.Errorf("redis: list jobs: %w", err)
		}
		type cand struct{ id, queue string }
		var cands []cand
		for i, c := range cmds {
			for _, id := range c.Val() {
				cands = append(cands, cand{id, srcs[i].queue})
			}
		}
		slices.SortFunc(cands, func(a, b cand) int {
			if p.Descending {
				a, b = b, a
			}
			switch {
			case a.id < b.id:
				return -1
			case a.id > b.id:
				return 1
			}
			return 0
		})
		cands = slices.CompactFunc(cands, func(a, b cand) bool { return a.id == b.id })
		exhausted := len(cands) < want
		if len(cands) > want {
			cands = cands[:want]
		}
		if len(cands) == 0 {
			break
		}
		if byID {
			ids := make([]string, len(cands))
			for i, c := range cands {
				ids[i] = c.id
			}
			qs, err := s.queuesOf(ctx, ids)
			if err != nil {
				return nil, "", fmt.Errorf("redis: list jobs: %w", err)
			}
			for i := range cands {
				cands[i].queue = qs[i]
			}
		}
		hcmds := make([]*goredis.MapStringStringCmd, len(cands))
		_, err = s.rdb.Pipelined(ctx, func(pl goredis.Pipeliner) error {
			for i, c := range cands {
				hcmds[i] = pl.HGetAll(ctx, s.jobKey(c.queue, c.id))
			}
			return nil
		})
		if err != nil {
			return nil, "", fmt.Errorf("redis: list jobs: %w", err)
		}
		for _, hc := range hcmds {
			j, err := decodeJob(hc.Val())
			if err != nil {
				return nil, "", err
			}
			if j == nil || (len(p.Kinds) > 0 && !slices.Contains(p.Kinds, j.Kind)) || !hasTags(j, p.Tags) ||
				(len(p.States) > 0 && !slices.Contains(p.States, j.State)) || !p.FinishedIn(j.CompletedAt) ||
				(byID && len(p.Queues) > 0 && !slices.Contains(p.Queues, j.Queue)) ||
				(p.WorkflowID != "" && j.WorkflowID != p.WorkflowID) || (p.Tenant != "" && j.Tenant != p.Tenant) {
				continue
			}
			out = append(out, j)
		}
		cursor = cands[len(cands)-1].id
		if len(out) > limit || exhausted {
			break
		}
	}
	if len(out) > limit {
		out = out[:limit]
		return out, out[limit-1].ID, nil
	}
	return out, "", nil
}

// hasTags reports whether j has every one of tags.
func hasTags(j *store.Job, tags []string) bool {
	for _, t := range tags {
		if !slices.Contains(j.Tags, t) {
			return false
		}
	}
	return true
}

// deleted reads the reply of a script that deletes jobs of one queue, {ids, workflows gone with
// their last job}, removes both from the global indexes and returns the ids.
func (s *Store) deleted(ctx context.Context, cmd *goredis.Cmd) ([]string, error) {
	res, err := cmd.Slice()
	if err != nil {
		return nil, err
	}
	if len(res) != 2 {
		return nil, fmt.Errorf("unexpected reply %v", res)
	}
	gone, wfs := strs(res[0]), strs(res[1])
	if len(gone) > 0 {
		if err := s.rdb.HDel(ctx, s.idsKey(), gone...).Err(); err != nil {
			return nil, err
		}
	}
	return gone, s.dropWorkflows(ctx, wfs)
}

// strs returns the strings of an array reply.
func strs(v any) []string {
	arr, _ := v.([]any)
	out := make([]string, 0, len(arr))
	for _, x := range arr {
		if str, ok := x.(string); ok {
			out = append(out, str)
		}
	}
	return out
}

// byIDReply is the decoded {"ok", wasActive, job, released, dropped, relay, token} reply of a by-id
// script.
type byIDReply struct {
	job       *store.Job
	wasActive bool
	// released is the queue where the script released workflow children ("" for none); dropped, the
	// workflow it deleted with its last job ("" for none).
	released, dropped string
	// relay says the script wrote to its queue's workflow outbox (relay.go).
	relay bool
	// token is the claim token of the run a cancel stopped ("" for none).
	token string
}

// byID runs one of the by-id scripts on job id and decodes its {status, ...} reply.
func (s *Store) byID(ctx context.Context, sc *luaFunc, op, id string, extra ...any) (byIDReply, error) {
	var out byIDReply
	q, err := s.queueOf(ctx, id)
	if err != nil {
		return out, err
	}
	res, err := sc.Run(ctx, s.rdb, s.keys(q), append([]any{id}, extra...)...).Slice()
	if err != nil {
		return out, fmt.Errorf("redis: %s job %s: %w", op, id, err)
	}
	switch res[0] {
	case "uc":
		key, _ := res[1].(string)
		hid, _ := res[2].(string)
		st, _ := res[3].(string)
		return out, fmt.Errorf("redis: %s job %s: %w", op, id,
			&store.UniqueConflictError{Key: key, ExistingID: hid, ExistingState: store.State(st)})
	case "nf":
		return out, notFound(id)
	case "bad":
		st, _ := res[1].(string)
		te := &store.TransitionError{JobID: id, Operation: op, From: store.State(st)}
		if len(res) > 2 && res[2] == "awaited" {
			te.Reason = store.ReasonAwaitedParent
		}
		return out, te
	}
	if out.job, err = decodeFlat(res[2]); err != nil {
		return out, err
	}
	was, _ := res[1].(int64)
	out.wasActive = was == 1
	if len(res) > 3 {
		out.released, _ = res[3].(string)
	}
	if len(res) > 4 {
		out.dropped, _ = res[4].(string)
	}
	if len(res) > 5 {
		r, _ := res[5].(int64)
		out.relay = r == 1
	}
	if len(res) > 6 {
		out.token, _ = res[6].(string)
	}
	return out, nil
}

// CancelJob cancels a job that is not terminal; an active job's runner is told with NotifyCancel,
// and the queue of workflow children the cancellation released (failure callbacks) is announced.
func (s *Store) CancelJob(ctx context.Context, id string) (*store.Job, error) {
	r, err := s.byID(ctx, scriptCancel, "cancel", id)
	if err != nil {
		return nil, err
	}
	var ns []store.Notification
	if r.wasActive {
		ns = append(ns, store.Notification{Kind: store.NotifyCancel, Queue: r.job.Queue, JobID: id, ClaimToken: r.token})
		if r.job.RateKey != "" {
			// Its key has room for one more job, as when a limited job finishes.
			ns = append(ns, store.Notification{Kind: store.NotifyInsert, Queue: r.job.Queue, Nonce: nonce()})
		}
	}
	if r.released != "" {
		ns = append(ns, store.Notification{Kind: store.NotifyInsert, Queue: r.released, Nonce: nonce()})
	}
	if r.relay {
		if err := s.relay(ctx, r.job.Queue); err != nil {
			return r.job, fmt.Errorf("redis: cancel job %s: cancelled, but its workflow's other queues were not told (Rescue will): %w", id, err)
		}
	}
	if err := s.publish(ctx, ns); err != nil {
		return r.job, fmt.Errorf("redis: cancel job %s: cancelled, but it was not announced: %w", id, err)
	}
	return r.job, nil
}

// RetryJob makes a discarded or cancelled job available again with its attempts reset. A workflow
// job waits again for its parents (pending) when their states would keep a pending job waiting, to
// be decided by their outcomes as if it had never left pending; otherwise it runs now with their
// results, even after a failed parent (the operator's call).
func (s *Store) RetryJob(ctx context.Context, id string) (*store.Job, error) {
	return s.makeAvailable(ctx, "retry", id, store.StateDiscarded, store.StateCancelled)
}

// ActivateJob moves a pending job to available.
func (s *Store) ActivateJob(ctx context.Context, id string) (*store.Job, error) {
	return s.makeAvailable(ctx, "activate", id, store.StatePending)
}

func (s *Store) makeAvailable(ctx context.Context, op, id string, from ...store.State) (*store.Job, error) {
	args := make([]any, len(from))
	for i, st := range from {
		args[i] = string(st)
	}
	r, err := s.byID(ctx, scriptMakeAvailable, op, id, args...)
	if err != nil {
		return nil, err
	}
	if r.relay {
		if err := s.relay(ctx, r.job.Queue); err != nil {
			return r.job, fmt.Errorf("redis: %s job %s: done, but its workflow's other queues were not told (Rescue will): %w", op, id, err)
		}
	}
	if r.job.State != store.StateAvailable {
		return r.job, nil
	}
	return r.job, s.publish(ctx, []store.Notification{{Kind: store.NotifyInsert, Queue: r.job.Queue, Nonce: nonce()}})
}

// DeleteJob removes a job that is not active and returns it as it was; a workflow whose last job
// it was leaves the workflow indexes too.
func (s *Store) DeleteJob(ctx context.Context, id string) (*store.Job, error) {
	r, err := s.byID(ctx, scriptDelete, "delete", id)
	if err != nil {
		return nil, err
	}
	if err := s.rdb.HDel(ctx, s.idsKey(), id).Err(); err != nil {
		return r.job, fmt.Errorf("redis: delete job %s: %w", id, err)
	}
	if r.dropped != "" {
		if err := s.dropWorkflows(ctx, []string{r.dropped}); err != nil {
			return r.job, fmt.Errorf("redis: delete job %s: %w", id, err)
		}
	}
	return r.job, nil
}

// ListQueues returns every queue that has jobs or is paused, by name, with its counts per state.
func (s *Store) ListQueues(ctx context.Context) ([]store.QueueInfo, error) {
	qs, err := s.queues(ctx)
	if err != nil {
		return nil, fmt.Errorf("redis: list queues: %w", err)
	}
	counts := make([][]*goredis.IntCmd, len(qs))
	paused := make([]*goredis.IntCmd, len(qs))
	_, err = s.rdb.Pipelined(ctx, func(pl goredis.Pipeliner) error {
		for i, q := range qs {
			counts[i] = make([]*goredis.IntCmd, len(store.AllStates))
			for k, st := range store.AllStates {
				counts[i][k] = pl.ZCard(ctx, s.qkey(q)+"st:"+string(st))
			}
			paused[i] = pl.Exists(ctx, s.qkey(q)+"paused")
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redis: list queues: %w", err)
	}
	out := make([]store.QueueInfo, 0, len(qs))
	for i, q := range qs {
		info := store.QueueInfo{Name: q, Paused: paused[i].Val() == 1, Counts: make(map[store.State]int64, 8)}
		var total int64
		for k, st := range store.AllStates {
			info.Counts[st] = counts[i][k].Val()
			total += info.Counts[st]
		}
		if total == 0 && !info.Paused {
			continue
		}
		out = append(out, info)
	}
	return out, nil
}

// PauseQueue stops claims from queue until ResumeQueue, and announces it.
func (s *Store) PauseQueue(ctx context.Context, queue string) error {
	var queueCmds []*goredis.IntCmd
	_, err := s.rdb.Pipelined(ctx, func(pl goredis.Pipeliner) error {
		queueCmds = s.registerQueues(ctx, pl, []string{queue})
		pl.Set(ctx, s.qkey(queue)+"paused", "1", 0)
		return nil
	})
	if err == nil {
		err = s.seedWeights(ctx, newQueues([]string{queue}, queueCmds))
	}
	if err != nil {
		return fmt.Errorf("redis: pause %s: %w", queue, err)
	}
	return s.publish(ctx, []store.Notification{{Kind: store.NotifyPause, Queue: queue}})
}

// ResumeQueue lets claims from queue start again, and announces it.
func (s *Store) ResumeQueue(ctx context.Context, queue string) error {
	if err := s.rdb.Del(ctx, s.qkey(queue)+"paused").Err(); err != nil {
		return fmt.Errorf("redis: resume %s: %w", queue, err)
	}
	return s.publish(ctx, []store.Notification{{Kind: store.NotifyResume, Queue: queue}})
}

// Elect makes leaderID the leader of name for ttl if nobody else leads it (SET NX PX), or renews
// its own leadership, and reports whether leaderID leads.
func (s *Store) Elect(ctx context.Context, name, leaderID string, ttl time.Duration) (bool, error) {
	ms := max(ttl.Milliseconds(), 1)
	n, err := scriptElect.Run(ctx, s.rdb, []string{s.leaderKey(name)}, leaderID, ms).Int()
	if err != nil {
		return false, fmt.Errorf("redis: elect %s: %w", name, err)
	}
	return n == 1, nil
}

// Resign ends leaderID's leadership of name, if it holds it.
func (s *Store) Resign(ctx context.Context, name, leaderID string) error {
	if err := scriptResign.Run(ctx, s.rdb, []string{s.leaderKey(name)}, leaderID).Err(); err != nil && !errors.Is(err, goredis.Nil) {
		return fmt.Errorf("redis: resign %s: %w", name, err)
	}
	return nil
}

// dueLater reports whether a completion is due at a time of its own (a retry, a snooze), one that
// Finish must translate to the server's clock.
func dueLater(cs []store.Completion) bool {
	for i := range cs {
		if (cs[i].State == store.StateRetryable || cs[i].State == store.StateScheduled) && !cs[i].ScheduledAt.IsZero() {
			return true
		}
	}
	return false
}

// serverOffset returns the Redis server's clock (TIME, which its scripts judge due times and
// leases by) minus this process's, to within half a round trip. A completion's ScheduledAt (a
// retry's backoff, a snooze) is computed from the clock of the process that ran the job: written
// as is, a process whose clock is an hour off would have its retries run an hour early or late.
// Shifted by the offset (zero within clockTolerance), the delay it stands for is kept and the
// server's clock decides the instant. One TIME per Finish that has such a completion; the finish script itself taking
// delays would spare it (a change to scripts.go).
func (s *Store) serverOffset(ctx context.Context) (time.Duration, error) {
	before := s.processNow()
	now, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("read the server's clock: %w", err)
	}
	after := s.processNow()
	rtt := after.Sub(before)
	off := now.Sub(before.Add(rtt / 2))
	// Right to within half the round trip: beyond the tolerance by less than that, the clocks may
	// agree and the reading have been slowed (a loaded machine), so nothing is moved.
	if bound := clockTolerance + rtt/2; off >= -bound && off <= bound {
		return 0, nil
	}
	return off, nil
}

// clockTolerance is how far this process's clock may be off the server's before serverOffset
// corrects its due times: within it (clocks kept by NTP, plus the reading's latency) they are
// written exactly as given, as the stores' shared tests require.
const clockTolerance = time.Second

// processClock is this process's clock (time.Now); a test can put it off for one store
// (export_clockskew_test.go) to play a process whose machine's clock is wrong.
var processClock skewclock.Clock[*Store]

// processNow is this process's clock, as a test may have put it off (processClock).
func (s *Store) processNow() time.Time { return processClock.Now(s) }
