package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto/store"
)

// Rate limits: on a single node a key's limit and use live in the global hash <prefix>rl:<key>
// (fields set, max, rate, period (µs), onlimit, ws and wc (the open window's start and count), and
// n:<state>, the key's jobs per state), with <prefix>rs:<key> (its scheduled and retryable jobs by
// due time, for Waiting) and <prefix>rlkeys (the keys with a stored limit, for listing in key
// order). A limit spans queues, so the claim script of any queue reads and updates it, in the same
// atomic step as the claim. A Redis Cluster cannot do that in one script (the limit and the queue
// are in different slots): there the limit lives in its key's own slot with a ledger of permits
// (ratelimit.go), tenant limits too.

// cluster reports whether the store runs on a Redis Cluster.
func (s *Store) cluster() bool {
	_, ok := s.rdb.(*goredis.ClusterClient)
	return ok
}

// validLimit checks a limit's fields: a zero field bounds nothing, so only negative fields and
// unknown actions are refused.
func validLimit(l store.RateLimit) error {
	if l.MaxActive < 0 || l.Rate < 0 || l.Period < 0 {
		return fmt.Errorf("rate limit %+v has a negative field: %w", l, store.ErrInvalidParams)
	}
	switch l.OnLimit {
	case "", store.LimitWait, store.LimitReschedule, store.LimitDrop:
		return nil
	}
	return fmt.Errorf("rate limit on-limit action %q (want wait, reschedule or drop): %w", l.OnLimit, store.ErrInvalidParams)
}

// encodeLimit is the form the scripts' setlimit reads: "max,rate,period_us,onlimit".
func encodeLimit(l store.RateLimit) string {
	return fmt.Sprintf("%d,%d,%d,%s", l.MaxActive, l.Rate, l.Period.Microseconds(), l.OnLimit)
}

func rateNotFound(key string) error {
	return fmt.Errorf("redis: rate limit %s: %w", key, store.ErrNotFound)
}

// SetRateLimit creates or replaces the limit under key and wakes the producers of every queue.
func (s *Store) SetRateLimit(ctx context.Context, key string, l store.RateLimit) error {
	if key == "" {
		return fmt.Errorf("redis: set rate limit: empty key: %w", store.ErrInvalidParams)
	}
	if err := validLimit(l); err != nil {
		return fmt.Errorf("redis: set rate limit %s: %w", key, err)
	}
	if s.cluster() {
		if err := s.setLimitCluster(ctx, key, l); err != nil {
			return fmt.Errorf("redis: set rate limit %s: %w", key, err)
		}
		return s.wakeAll(ctx)
	}
	if err := scriptSetLimit.Run(ctx, s.rdb, []string{s.prefix}, key, encodeLimit(l)).Err(); err != nil && !errors.Is(err, goredis.Nil) {
		return fmt.Errorf("redis: set rate limit %s: %w", key, err)
	}
	return s.wakeAll(ctx)
}

// wakeAll announces every queue: a changed limit may let any of them claim more.
func (s *Store) wakeAll(ctx context.Context) error {
	qs, err := s.queues(ctx)
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	ns := make([]store.Notification, len(qs))
	for i, q := range qs {
		ns[i] = store.Notification{Kind: store.NotifyInsert, Queue: q, Nonce: nonce()}
	}
	return s.publish(ctx, ns)
}

// DeleteRateLimit removes the limit under key; its jobs become unlimited.
func (s *Store) DeleteRateLimit(ctx context.Context, key string) error {
	var found bool
	if s.cluster() {
		ok, err := s.deleteLimitCluster(ctx, key)
		if err != nil {
			return fmt.Errorf("redis: delete rate limit %s: %w", key, err)
		}
		found = ok
	} else {
		n, err := scriptDeleteLimit.Run(ctx, s.rdb, []string{s.prefix}, key).Int()
		if err != nil {
			return fmt.Errorf("redis: delete rate limit %s: %w", key, err)
		}
		found = n == 1
	}
	if !found {
		return rateNotFound(key)
	}
	return s.wakeAll(ctx)
}

// limitInfos reads the limits and use of keys, skipping keys without a stored limit.
func (s *Store) limitInfos(ctx context.Context, keys []string) ([]*store.RateLimitInfo, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	if s.cluster() {
		infos, err := s.limitInfosCluster(ctx, keys)
		if err != nil {
			return nil, fmt.Errorf("redis: rate limits: %w", err)
		}
		return infos, nil
	}
	res, err := scriptLimitInfo.Run(ctx, s.rdb, []string{s.prefix}, toAny(keys)...).Slice()
	if err != nil {
		return nil, fmt.Errorf("redis: rate limits: %w", err)
	}
	var out []*store.RateLimitInfo
	for i, r := range res {
		f, _ := r.([]any)
		str := func(x int) string { v, _ := f[x].(string); return v }
		n := func(x int) int64 { v, _ := strconv.ParseInt(str(x), 10, 64); return v }
		if str(0) != "1" {
			continue
		}
		info := &store.RateLimitInfo{
			Key: keys[i],
			Limit: store.RateLimit{MaxActive: int(n(1)), Rate: int(n(2)), Period: time.Duration(n(3)) * time.Microsecond,
				OnLimit: store.LimitAction(str(4))},
			Active:  n(7),
			Waiting: n(8) + n(9),
		}
		if ws := n(5); ws > 0 {
			info.WindowStart, info.WindowCount = time.UnixMicro(ws).UTC(), n(6)
		}
		out = append(out, info)
	}
	return out, nil
}

// GetRateLimit returns the limit under key with its use, or ErrNotFound.
func (s *Store) GetRateLimit(ctx context.Context, key string) (*store.RateLimitInfo, error) {
	infos, err := s.limitInfos(ctx, []string{key})
	if err != nil {
		return nil, err
	}
	if len(infos) == 0 {
		return nil, rateNotFound(key)
	}
	return infos[0], nil
}

// ListRateLimits returns every stored limit with its use, in key order.
func (s *Store) ListRateLimits(ctx context.Context) ([]*store.RateLimitInfo, error) {
	keys, err := s.rdb.ZRange(ctx, s.rateKeysKey(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: rate limits: %w", err)
	}
	return s.limitInfos(ctx, keys)
}

// Workflows: a workflow is a hash wf:<id> (id, name, type, meta, total, created, cancelled,
// lastdone, n:<state>, its members per state, and c:<state>, its callbacks per state, kept by the
// scripts' place and unplace; cbc marks a workflow whose callbacks are counted so) with a
// sorted set wfj:<id> of its job ids. A job's children are the field kids of its hash; every script
// that can end a job settles the children of the workflow jobs it ended before it returns, so a
// child is released (or cancelled) in the same script as its parent's transition.
//
// Where those keys live depends on the workflow's queues:
//
//   - All its jobs in one queue (the common case): the keys are tagged by that queue
//     (<prefix>{q:<queue>}:wf:<id>), and its jobs carry the field wfl, so every script of the
//     workflow touches the queue's one slot, like any other queue script.
//   - Jobs in several queues, on a single node: the keys are global (<prefix>wf:<id>), and the
//     scripts find the other queues' jobs through the id index.
//   - Jobs in several queues, on a Redis Cluster: the workflow is split into one part per queue, each
//     of the layout above in its queue's slot, and outcomes reach the children in other queues
//     through each queue's outbox (relay.go).
//
// The workflow index <prefix>wfq{<prefix>ids} (a hash: workflow id -> its queue, "" for the global
// layout, its queues after newlines for a split workflow) finds a workflow's keys by id. Its hash
// tag is the id index's key, so one call registers a new workflow there and its jobs in the id
// index, all or nothing, before the workflow's script runs in its queue's slot (a cluster cannot
// do both in one script). The registration stays pending
// (<prefix>wfp{<prefix>ids}, <prefix>wfr{<prefix>ids}) until the workflow is written. A crash between
// the two calls leaves an entry naming no workflow: it reads as not found, and a retry of the same
// workflow is refused as a duplicate, until Cleanup finds the registration pending for longer than
// pendingGrace with no workflow written and undoes it (index entry and job ids). A workflow with no
// entry is one written before the index existed (global layout): it is read, run and cleaned up as
// before, with no migration.

// wfIndexKey is the workflow index (see above): in the id index's slot through its hash tag.
func (s *Store) wfIndexKey() string { return s.prefix + "wfq{" + s.idsKey() + "}" }

// wfRegKeys are the keys of a workflow's registration: the id index, the workflow index, the
// pending registrations by time and their job ids (all in the id index's slot).
func (s *Store) wfRegKeys() []string {
	tag := "{" + s.idsKey() + "}"
	return []string{s.idsKey(), s.wfIndexKey(), s.prefix + "wfp" + tag, s.prefix + "wfr" + tag}
}

// pendingGrace is how long a workflow's registration may stay pending before Cleanup takes its
// writer for dead: far longer than the two back-to-back calls of InsertWorkflow take.
const pendingGrace = 10 * time.Minute

// sweepRegistrations undoes up to 100 workflow registrations pending for longer than pendingGrace
// whose workflow was never written (their writer died between its calls), and ends those whose
// workflow was written (the writer died before ending its registration), listing them. A split
// workflow (relay.go) with every part written has its held roots released; one with only some
// parts written has them deleted, and is undone.
func (s *Store) sweepRegistrations(ctx context.Context) error {
	res, err := scriptStaleWorkflows.Run(ctx, s.rdb, s.wfRegKeys(), pendingGrace.Microseconds(), 100).StringSlice()
	if err != nil || len(res) == 0 {
		return err
	}
	n := len(res) / 2
	parts := make([][]string, n) // per registration, the queues of its parts ("" for the global layout)
	exists := make([][]*goredis.IntCmd, n)
	_, err = s.rdb.Pipelined(ctx, func(pl goredis.Pipeliner) error {
		for k := range n {
			id, v := res[2*k], res[2*k+1]
			if parts[k] = splitQueues(v); parts[k] == nil {
				parts[k] = []string{v}
			}
			for _, q := range parts[k] {
				base := s.prefix
				if q != "" {
					base = s.qkey(q)
				}
				exists[k] = append(exists[k], pl.Exists(ctx, base+"wf:"+id))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	args := make([]any, 0, len(res))
	for k := range n {
		id, written := res[2*k], 0
		for _, c := range exists[k] {
			written += int(c.Val())
		}
		switch {
		case written == len(parts[k]):
			if len(parts[k]) > 1 {
				err = s.pipelinedScripts(ctx, func(run runScript) {
					for _, q := range parts[k] {
						run(scriptReleaseHeld, s.keys(q), id)
					}
				})
			}
			if err == nil {
				err = s.rdb.ZAdd(ctx, s.workflowsKey(), goredis.Z{Member: id}).Err()
			}
			args = append(args, id, "")
		case written > 0:
			err = s.dropParts(ctx, id, parts[k])
			args = append(args, id, "1")
		default:
			args = append(args, id, "1")
		}
		if err != nil {
			return fmt.Errorf("workflow %s: %w", id, err)
		}
	}
	return ignoreNil(scriptSettleRegistrations.Run(ctx, s.rdb, s.wfRegKeys(), args...).Err())
}

// ignoreNil drops go-redis's Nil (a nil reply) from err.
func ignoreNil(err error) error {
	if errors.Is(err, goredis.Nil) {
		return nil
	}
	return err
}

func workflowNotFound(id string) error {
	return fmt.Errorf("redis: workflow %s: %w", id, store.ErrNotFound)
}

// workflowBases returns, for each workflow id, the key prefix of its keys (its queue's, or the
// store's prefix for the global layout) and its queue ("" for the global layout).
func (s *Store) workflowBases(ctx context.Context, ids []string) (bases, queues []string, err error) {
	vals, err := s.rdb.HMGet(ctx, s.wfIndexKey(), ids...).Result()
	if err != nil {
		return nil, nil, err
	}
	bases, queues = make([]string, len(ids)), make([]string, len(ids))
	for i, v := range vals {
		q, _ := v.(string)
		queues[i], bases[i] = q, s.prefix
		if q != "" {
			bases[i] = s.qkey(q)
		}
	}
	return bases, queues, nil
}

// dropWorkflows removes workflows deleted with their last job from the workflow index, the
// listing's index and, should their writer have died before ending it, their registration.
func (s *Store) dropWorkflows(ctx context.Context, ids []string) error {
	ids, err := s.withoutParts(ctx, ids)
	if err != nil || len(ids) == 0 {
		return err
	}
	reg := s.wfRegKeys()
	_, err = s.rdb.Pipelined(ctx, func(pl goredis.Pipeliner) error {
		pl.HDel(ctx, s.wfIndexKey(), ids...)
		pl.ZRem(ctx, reg[2], toAny(ids)...)
		pl.HDel(ctx, reg[3], ids...)
		pl.ZRem(ctx, s.workflowsKey(), toAny(ids)...)
		return nil
	})
	return err
}

// withoutParts returns ids without the split workflows (relay.go) that still have a part in some
// queue: a part gone with its last job leaves the others.
func (s *Store) withoutParts(ctx context.Context, ids []string) ([]string, error) {
	if len(ids) == 0 || !s.cluster() {
		return ids, nil
	}
	_, queues, err := s.workflowBases(ctx, ids)
	if err != nil {
		return nil, err
	}
	exists := make([][]*goredis.IntCmd, len(ids))
	_, err = s.rdb.Pipelined(ctx, func(pl goredis.Pipeliner) error {
		for i, id := range ids {
			for _, q := range splitQueues(queues[i]) {
				exists[i] = append(exists[i], pl.Exists(ctx, s.qkey(q)+"wf:"+id))
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := ids[:0:0]
	for i, id := range ids {
		if !slices.ContainsFunc(exists[i], func(c *goredis.IntCmd) bool { return c.Val() > 0 }) {
			out = append(out, id)
		}
	}
	return out, nil
}

// InsertWorkflow stores the workflow: its index entry and its jobs' ids first (one call), then the
// workflow and all its jobs in one script (on a Redis Cluster, for a workflow whose jobs span queues,
// one script per queue and a second to release the roots, see relay.go), and announces the queues of
// the jobs claimable now.
func (s *Store) InsertWorkflow(ctx context.Context, p store.WorkflowParams) (*store.Workflow, []*store.Job, error) {
	for _, jp := range p.Jobs {
		if err := validInsert(jp); err != nil {
			return nil, nil, fmt.Errorf("redis: insert workflow %s: %w", p.ID, err)
		}
		if jp.RateLimit != nil {
			if err := validLimit(*jp.RateLimit); err != nil {
				return nil, nil, fmt.Errorf("redis: insert workflow %s: job %s: %w", p.ID, jp.ID, err)
			}
		}
	}
	if err := store.ValidateWorkflow(p); err != nil {
		return nil, nil, fmt.Errorf("redis: insert workflow: %w", err)
	}
	var queues []string
	for _, jp := range p.Jobs {
		if !slices.Contains(queues, jp.Queue) {
			queues = append(queues, jp.Queue)
		}
	}
	cluster := s.cluster()
	// local: the workflow's keys are tagged by its one queue (see above); split: it spans a
	// cluster's queues and is written as one part per queue (relay.go).
	local, split := len(queues) == 1, cluster && len(queues) > 1
	wfQueue, keys, layout := "", []string{s.prefix}, ""
	switch {
	case local:
		wfQueue, keys, layout = queues[0], s.keys(queues[0]), "1"
	case split:
		for _, q := range queues {
			if strings.Contains(q, splitMark) {
				return nil, nil, fmt.Errorf("redis: insert workflow %s: queue %q holds a newline, which a workflow spanning a "+
					"Redis Cluster's queues cannot: %w", p.ID, q, store.ErrInvalidParams)
			}
		}
		wfQueue, layout = splitValue(queues), "1"
	}
	kids := make(map[string][]string)
	members := 0
	for _, jp := range p.Jobs {
		for _, pid := range jp.ParentIDs {
			kids[pid] = append(kids[pid], jp.ID)
		}
		if jp.RunOn == "" {
			members++
		}
	}
	reg := make([]any, 0, 2+2*len(p.Jobs))
	reg = append(reg, p.ID, wfQueue)
	for _, jp := range p.Jobs {
		reg = append(reg, jp.ID, jp.Queue)
	}
	var regCmd *goredis.Cmd
	var queueCmds []*goredis.IntCmd
	err := s.pipelined(ctx, func(pl goredis.Pipeliner, run runScript) error {
		queueCmds = s.registerQueues(ctx, pl, queues)
		if split {
			pl.SAdd(ctx, s.splitSetKey(), toAny(queues)...)
		}
		regCmd = run(scriptRegisterWorkflow, s.wfRegKeys(), reg...)
		return nil
	})
	dup, regErr := regCmd.Result()
	if regErr == nil && dup != nil {
		if _, ok := dup.([]any); ok {
			return nil, nil, fmt.Errorf("redis: insert workflow %s: %w", p.ID, store.ErrDuplicate)
		}
		return nil, nil, fmt.Errorf("redis: insert workflow %s: job %v: %w", p.ID, dup, store.ErrDuplicate)
	}
	if regErr = ignoreNil(regErr); err == nil {
		err = regErr
	}
	if err != nil {
		if !isRedisError(regErr) {
			// The registration ran, or may have with its reply lost (a cancelled context, a
			// connection gone): nothing is written yet, so give it back now rather than leave the
			// workflow and its ids taken until Cleanup's sweep, pendingGrace later.
			s.undoRegistration(context.WithoutCancel(ctx), reg)
		}
		return nil, nil, fmt.Errorf("redis: insert workflow %s: %w", p.ID, err)
	}
	// A queue new to a cluster gets the tenant weights before its first jobs (tenant.go), and the
	// limits the jobs bring are stored in their keys' slots (ratelimit.go).
	if err := s.seedWeights(ctx, newQueues(queues, queueCmds)); err != nil {
		s.undoRegistration(context.WithoutCancel(ctx), reg)
		return nil, nil, fmt.Errorf("redis: insert workflow %s: tenant weights: %w", p.ID, err)
	}
	if err := s.insertLimits(ctx, p.Jobs); err != nil {
		s.undoRegistration(context.WithoutCancel(ctx), reg)
		return nil, nil, fmt.Errorf("redis: insert workflow %s: rate limits: %w", p.ID, err)
	}
	metaFlag, meta := "", ""
	if p.Meta != nil {
		metaFlag, meta = "1", string(p.Meta)
	}
	args := []any{p.ID, p.Name, p.Type, metaFlag, meta, members, len(p.Jobs), layout, boolFlag(!cluster)}
	var res any
	if split {
		res, err = s.insertSplit(ctx, p, queues, kids, args, reg)
	} else {
		res, err = s.writeWorkflow(ctx, p, keys, args, kids, local, reg)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("redis: insert workflow %s: %w", p.ID, err)
	}
	// The workflow is stored and its jobs may be claimed already: what is left (ending the
	// registration, listing, announcing) is not undone by a cancel, nor left half done by one.
	ctx = context.WithoutCancel(ctx)
	err = s.pipelined(ctx, func(pl goredis.Pipeliner, run runScript) error {
		pl.ZAdd(ctx, s.workflowsKey(), goredis.Z{Member: p.ID})
		run(scriptSettleRegistrations, s.wfRegKeys(), p.ID, "")
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("redis: insert workflow %s: written, not indexed for ListWorkflows: %w", p.ID, err)
	}
	nowUS, _ := res.(int64)
	now := time.UnixMicro(nowUS).UTC()
	jobs := make([]*store.Job, len(p.Jobs))
	var ns []store.Notification
	announce := func(q string, due time.Time) {
		for i := range ns {
			if ns[i].Queue == q {
				if !ns[i].DueAt.IsZero() && (due.IsZero() || due.Before(ns[i].DueAt)) {
					ns[i].DueAt = due
				}
				return
			}
		}
		ns = append(ns, store.Notification{Kind: store.NotifyInsert, Queue: q, DueAt: due, Nonce: nonce()})
	}
	for i, jp := range p.Jobs {
		j := newJobFromParams(jp, now)
		jobs[i] = j
		switch j.State {
		case store.StateAvailable:
			announce(j.Queue, time.Time{})
		case store.StateScheduled:
			due := j.ScheduledAt
			if !due.After(now) {
				due = time.Time{}
			}
			announce(j.Queue, due)
		}
	}
	if err := s.publish(ctx, ns); err != nil {
		return nil, nil, fmt.Errorf("redis: insert workflow %s: written, announcement failed: %w", p.ID, err)
	}
	w, err := s.GetWorkflow(ctx, p.ID)
	if err != nil {
		return nil, nil, err
	}
	return w, jobs, nil
}

// writeWorkflow writes workflow p and all its jobs in one script (keys, the workflow's own
// arguments args and its registration's reg as InsertWorkflow built them), and returns the
// server's time of the write. On a failure it undoes the registration, so that a retry is not
// refused as a duplicate, unless the workflow was written all the same (its reply lost), which then
// stands.
func (s *Store) writeWorkflow(ctx context.Context, p store.WorkflowParams, keys []string, args []any, kids map[string][]string, local bool, reg []any) (any, error) {
	cluster := s.cluster()
	for _, jp := range p.Jobs {
		f := insertFields(jp, cluster)
		if k := kids[jp.ID]; len(k) > 0 {
			f = append(f, "kids", strings.Join(k, ","))
		}
		if local {
			f = append(f, "wfl", "1")
		}
		rl := ""
		if jp.RateLimit != nil && !cluster {
			rl = encodeLimit(*jp.RateLimit)
		}
		args = append(args, jp.Queue, jp.ID, jp.RateKey, rl, len(f)/2)
		args = append(args, f...)
	}
	res, err := scriptInsertWorkflow.Run(ctx, s.rdb, keys, args...).Result()
	if err == nil && res == "dup" {
		err = store.ErrDuplicate
	}
	if err == nil {
		return res, nil
	}
	bg := context.WithoutCancel(ctx)
	if !isRedisError(err) && !errors.Is(err, store.ErrDuplicate) {
		// The script ran, or may have with its reply lost (a cancelled context, a connection
		// gone): whether the workflow is written decides. Written, its jobs may be claimed
		// already, so it stands and the insert goes on; not written, it is undone below.
		created, cerr := s.rdb.HGet(bg, keys[0]+"wf:"+p.ID, "created").Result()
		switch {
		case cerr == nil:
			return fromMicros(created).UnixMicro(), nil
		case !errors.Is(cerr, goredis.Nil):
			// Unknown: the registration stays pending for Cleanup's sweep, which tells.
			return nil, fmt.Errorf("%w (and whether the workflow was written could not be read: %v)", err, cerr)
		}
	}
	s.undoRegistration(bg, reg)
	return nil, err
}

// undoRegistration gives back the registration that scriptRegisterWorkflow made with arguments reg
// (workflow id, its queue, then job id, queue pairs), of a workflow not written: its entry in the
// workflow index and its jobs' in the id index go at once, so that a retry of the same insert is
// not refused as a duplicate. A registration that is not this one (the call was refused, with its
// reply lost, as a duplicate of another insert's) is left alone. Errors are dropped: the
// registration is then left to Cleanup's sweep (see pendingGrace).
func (s *Store) undoRegistration(ctx context.Context, reg []any) {
	args := make([]any, 0, 2+len(reg)/2)
	args = append(args, reg[0], reg[1])
	for i := 2; i < len(reg); i += 2 {
		args = append(args, reg[i])
	}
	scriptUndoRegistration.Run(ctx, s.rdb, s.wfRegKeys(), args...)
}

// GetWorkflow returns one workflow, or ErrNotFound.
func (s *Store) GetWorkflow(ctx context.Context, id string) (*store.Workflow, error) {
	ws, err := s.getWorkflows(ctx, []string{id})
	if err != nil {
		return nil, fmt.Errorf("redis: workflow %s: %w", id, err)
	}
	if ws[0] == nil {
		return nil, workflowNotFound(id)
	}
	return ws[0], nil
}

// getWorkflows reads workflows by id (nil for one not found): their keys through the workflow index,
// then their hashes, pipelined.
func (s *Store) getWorkflows(ctx context.Context, ids []string) ([]*store.Workflow, error) {
	out := make([]*store.Workflow, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	bases, queues, err := s.workflowBases(ctx, ids)
	if err != nil {
		return nil, err
	}
	// A split workflow's parts (relay.go) are read together and merged.
	cmds := make([][]*goredis.MapStringStringCmd, len(ids))
	_, err = s.rdb.Pipelined(ctx, func(pl goredis.Pipeliner) error {
		for i, id := range ids {
			if parts := splitQueues(queues[i]); parts != nil {
				for _, q := range parts {
					cmds[i] = append(cmds[i], pl.HGetAll(ctx, s.qkey(q)+"wf:"+id))
				}
				continue
			}
			cmds[i] = append(cmds[i], pl.HGetAll(ctx, bases[i]+"wf:"+id))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, id := range ids {
		parts := make([]map[string]string, len(cmds[i]))
		for k, c := range cmds[i] {
			parts[k] = c.Val()
		}
		if m := mergeParts(parts); m != nil {
			out[i] = decodeWorkflow(id, m)
		}
	}
	return out, nil
}

// decodeWorkflow builds a workflow from its hash.
func decodeWorkflow(id string, m map[string]string) *store.Workflow {
	w := &store.Workflow{ID: id, Name: m["name"], Type: m["type"], Counts: make(map[store.State]int, 8),
		CreatedAt: fromMicros(m["created"]), CancelledAt: fromMicros(m["cancelled"])}
	if v, ok := m["meta"]; ok {
		w.Meta = []byte(v)
	}
	for _, st := range store.AllStates {
		n, _ := strconv.Atoi(m["n:"+string(st)])
		w.Counts[st] = n
		w.Total += n
	}
	if m["cbc"] == "1" { // a workflow written before callbacks were counted is judged by its members
		cb := &w.Callbacks
		for _, st := range store.AllStates {
			n, _ := strconv.Atoi(m["c:"+string(st)])
			cb.Total += n
			switch st {
			case store.StateCompleted:
				cb.Completed = n
			case store.StateCancelled:
				cb.Cancelled = n
			case store.StateDiscarded:
				cb.Discarded = n
			}
		}
	}
	w.State = store.DeriveWorkflowState(!w.CancelledAt.IsZero(), w.Total, w.Counts, w.Callbacks)
	if w.State != store.WorkflowRunning {
		w.FinishedAt = fromMicros(m["lastdone"])
		if w.CancelledAt.After(w.FinishedAt) {
			w.FinishedAt = w.CancelledAt
		}
		if w.FinishedAt.IsZero() {
			w.FinishedAt = w.CreatedAt
		}
	}
	return w
}

// CancelWorkflow cancels every job of the workflow that is not terminal (telling the runners of
// active ones), marks it cancelled and returns it with the jobs it cancelled as they were before. A
// completed or failed workflow (members and callbacks terminal) is left so, with an error matching
// store.ErrWorkflowFinished.
func (s *Store) CancelWorkflow(ctx context.Context, id string) (*store.Workflow, []*store.Job, error) {
	bases, queues, err := s.workflowBases(ctx, []string{id})
	if err != nil {
		return nil, nil, fmt.Errorf("redis: cancel workflow %s: %w", id, err)
	}
	if queues[0] == "" && s.cluster() {
		// The global layout exists on a single node only (and its script would cross slots here).
		return nil, nil, workflowNotFound(id)
	}
	// A split workflow (relay.go) is cancelled part by part.
	parts, keys := []string{queues[0]}, []string{bases[0]}
	if split := splitQueues(queues[0]); split != nil {
		parts, keys = split, nil
		for _, q := range split {
			keys = append(keys, s.qkey(q))
		}
	}
	res, err := s.cancelParts(ctx, scriptCancelRunningWorkflow, parts, keys, id)
	if err != nil {
		return nil, nil, fmt.Errorf("redis: cancel workflow %s: %w", id, err)
	}
	// A part whose members and callbacks all finished changed nothing. When another part had one
	// left, the workflow was running and can no longer complete: those parts are cancelled too.
	// Otherwise it had finished, and stays so.
	var finished []int
	state := store.WorkflowCompleted
	for i, r := range res {
		if st, ok := r.(string); ok && st != "nf" {
			finished = append(finished, i)
			if st == string(store.WorkflowFailed) {
				state = store.WorkflowFailed
			}
		}
	}
	if len(finished) > 0 && len(finished) < len(res) {
		var rest, restKeys []string
		for _, i := range finished {
			rest, restKeys = append(rest, parts[i]), append(restKeys, keys[i])
		}
		more, err := s.cancelParts(ctx, scriptCancelWorkflow, rest, restKeys, id)
		if err != nil {
			return nil, nil, fmt.Errorf("redis: cancel workflow %s: %w", id, err)
		}
		for k, i := range finished {
			res[i] = more[k]
		}
	}
	var (
		told      []any
		cancelled []*store.Job
	)
	found := false
	for _, r := range res {
		switch r {
		case "nf":
			continue
		case string(store.WorkflowCompleted), string(store.WorkflowFailed):
			return nil, nil, fmt.Errorf("redis: cancel workflow: %w", store.CancelRefusal(id, state))
		}
		found = true
		reply, _ := r.([]any)
		if len(reply) != 2 {
			return nil, nil, fmt.Errorf("redis: cancel workflow %s: unexpected reply %T", id, r)
		}
		t, _ := reply[0].([]any)
		told = append(told, t...)
		was, _ := reply[1].([]any)
		for _, h := range was {
			j, err := decodeFlat(h)
			if err != nil {
				return nil, nil, fmt.Errorf("redis: cancel workflow %s: %w", id, err)
			}
			cancelled = append(cancelled, j)
		}
	}
	// A split workflow's parts answer apart: the contract's order is the ids'.
	slices.SortFunc(cancelled, func(a, b *store.Job) int { return strings.Compare(a.ID, b.ID) })
	if !found {
		return nil, nil, workflowNotFound(id)
	}
	if len(parts) > 1 {
		// The outcomes the cancellations wrote for the other parts change nothing there (their jobs
		// are cancelled too); relaying them empties the outboxes.
		if err := s.relay(ctx, parts...); err != nil {
			s.logf("redis: cancel workflow %s: %v", id, err)
		}
	}
	var ns []store.Notification
	announced := map[string]bool{}
	for i := 0; i+2 < len(told); i += 3 {
		q, _ := told[i].(string)
		jid, _ := told[i+1].(string)
		token, _ := told[i+2].(string)
		ns = append(ns, store.Notification{Kind: store.NotifyCancel, Queue: q, JobID: jid, ClaimToken: token})
		if !announced[q] {
			// A running job cancelled may free its rate key's slot: the queue's producers claim again
			// (as CancelJob does for a limited job) rather than wait for their poll.
			announced[q] = true
			ns = append(ns, store.Notification{Kind: store.NotifyInsert, Queue: q, Nonce: nonce()})
		}
	}
	if err := s.publish(ctx, ns); err != nil {
		return nil, nil, fmt.Errorf("redis: cancel workflow %s: cancelled, but runners were not told: %w", id, err)
	}
	w, err := s.GetWorkflow(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	return w, cancelled, nil
}

// cancelParts runs a cancel script (scriptCancelWorkflow's arguments) on each part of workflow id,
// whose keys are keys, and returns the replies in parts order.
func (s *Store) cancelParts(ctx context.Context, f *luaFunc, parts, keys []string, id string) ([]any, error) {
	cmds := make([]*goredis.Cmd, len(parts))
	err := s.pipelined(ctx, func(_ goredis.Pipeliner, run runScript) error {
		for i, q := range parts {
			cmds[i] = run(f, []string{keys[i]}, id, q)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]any, len(cmds))
	for i, c := range cmds {
		if out[i], err = c.Result(); err != nil {
			return nil, err
		}
	}
	return out, nil
}
