package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto/store"
)

// Rate limits: a key's limit and use live in the global hash <prefix>rl:<key> (fields set, max,
// rate, period (µs), onlimit, ws and wc (the open window's start and count), and n:<state>, the
// key's jobs per state), with <prefix>rs:<key> (its scheduled and retryable jobs by due time, for
// Waiting) and <prefix>rlkeys (the keys with a stored limit, for listing in key order). A limit
// spans queues, so the claim script of any queue reads and updates it: that is one script on a
// single Redis node, but crosses slots on a Redis Cluster, where jobs with a rate key are refused
// (store.ErrUnsupported).

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
		return fmt.Errorf("redis: set rate limit %s: rate limits on a Redis Cluster: %w", key, store.ErrUnsupported)
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
	n, err := scriptDeleteLimit.Run(ctx, s.rdb, []string{s.prefix}, key).Int()
	if err != nil {
		return fmt.Errorf("redis: delete rate limit %s: %w", key, err)
	}
	if n == 0 {
		return rateNotFound(key)
	}
	return s.wakeAll(ctx)
}

// limitInfos reads the limits and use of keys, skipping keys without a stored limit.
func (s *Store) limitInfos(ctx context.Context, keys []string) ([]*store.RateLimitInfo, error) {
	if len(keys) == 0 {
		return nil, nil
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
	keys, err := s.rdb.ZRange(ctx, s.prefix+"rlkeys", 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: rate limits: %w", err)
	}
	return s.limitInfos(ctx, keys)
}

// Workflows: a workflow is the global hash <prefix>wf:<id> (id, name, type, meta, total, created,
// cancelled, lastdone, and n:<state>, its members per state, kept by the scripts' place and
// unplace) with the global sorted set <prefix>wfj:<id> of its job ids. A job's children are the
// field kids of its hash; every script that can end a job settles the children of the workflow
// jobs it ended before it returns, so a child is released (or cancelled) in the same script as its
// parent's transition. A workflow's jobs may sit in several queues, so these scripts cross slots:
// on a Redis Cluster workflows are refused (store.ErrUnsupported).

func workflowNotFound(id string) error {
	return fmt.Errorf("redis: workflow %s: %w", id, store.ErrNotFound)
}

// InsertWorkflow stores the workflow and all its jobs in one script and announces the queues of
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
	if s.cluster() {
		return nil, nil, fmt.Errorf("redis: insert workflow %s: workflows on a Redis Cluster (a workflow spans queues, so slots): %w",
			p.ID, store.ErrUnsupported)
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
	reg := make([]any, 0, 2*len(p.Jobs))
	var queues []any
	for _, jp := range p.Jobs {
		reg = append(reg, jp.ID, jp.Queue)
		queues = append(queues, jp.Queue)
	}
	var regCmd *goredis.Cmd
	err := s.pipelined(ctx, func(pl goredis.Pipeliner, run runScript) error {
		pl.SAdd(ctx, s.queuesKey(), queues...)
		regCmd = run(scriptRegisterIDs, []string{s.idsKey()}, reg...)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("redis: insert workflow %s: %w", p.ID, err)
	}
	if dup, err := regCmd.Result(); err == nil && dup != nil {
		return nil, nil, fmt.Errorf("redis: insert workflow %s: job %v: %w", p.ID, dup, store.ErrDuplicate)
	} else if err != nil && !errors.Is(err, goredis.Nil) {
		return nil, nil, fmt.Errorf("redis: insert workflow %s: %w", p.ID, err)
	}
	metaFlag, meta := "", ""
	if p.Meta != nil {
		metaFlag, meta = "1", string(p.Meta)
	}
	args := []any{p.ID, p.Name, p.Type, metaFlag, meta, members, len(p.Jobs)}
	for _, jp := range p.Jobs {
		f := insertFields(jp, false)
		if k := kids[jp.ID]; len(k) > 0 {
			f = append(f, "kids", strings.Join(k, ","))
		}
		rl := ""
		if jp.RateLimit != nil {
			rl = encodeLimit(*jp.RateLimit)
		}
		args = append(args, jp.Queue, jp.ID, jp.RateKey, rl, len(f)/2)
		args = append(args, f...)
	}
	res, err := scriptInsertWorkflow.Run(ctx, s.rdb, []string{s.prefix}, args...).Result()
	if err != nil || res == "dup" {
		s.rdb.HDel(context.WithoutCancel(ctx), s.idsKey(), idsOf(p.Jobs)...)
		if err != nil {
			return nil, nil, fmt.Errorf("redis: insert workflow %s: %w", p.ID, err)
		}
		return nil, nil, fmt.Errorf("redis: insert workflow %s: %w", p.ID, store.ErrDuplicate)
	}
	if err := s.rdb.ZAdd(ctx, s.workflowsKey(), goredis.Z{Member: p.ID}).Err(); err != nil {
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

// GetWorkflow returns one workflow, or ErrNotFound.
func (s *Store) GetWorkflow(ctx context.Context, id string) (*store.Workflow, error) {
	m, err := s.rdb.HGetAll(ctx, s.prefix+"wf:"+id).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: workflow %s: %w", id, err)
	}
	if m["id"] == "" {
		return nil, workflowNotFound(id)
	}
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
	w.State = store.DeriveWorkflowState(!w.CancelledAt.IsZero(), w.Total, w.Counts)
	if w.State != store.WorkflowRunning {
		w.FinishedAt = fromMicros(m["lastdone"])
		if w.CancelledAt.After(w.FinishedAt) {
			w.FinishedAt = w.CancelledAt
		}
		if w.FinishedAt.IsZero() {
			w.FinishedAt = w.CreatedAt
		}
	}
	return w, nil
}

// CancelWorkflow cancels every job of the workflow that is not terminal (telling the runners of
// active ones), marks it cancelled and returns it.
func (s *Store) CancelWorkflow(ctx context.Context, id string) (*store.Workflow, error) {
	res, err := scriptCancelWorkflow.Run(ctx, s.rdb, []string{s.prefix}, id).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: cancel workflow %s: %w", id, err)
	}
	if res == "nf" {
		return nil, workflowNotFound(id)
	}
	told, _ := res.([]any)
	var ns []store.Notification
	for i := 0; i+1 < len(told); i += 2 {
		q, _ := told[i].(string)
		jid, _ := told[i+1].(string)
		ns = append(ns, store.Notification{Kind: store.NotifyCancel, Queue: q, JobID: jid})
	}
	if err := s.publish(ctx, ns); err != nil {
		return nil, fmt.Errorf("redis: cancel workflow %s: cancelled, but runners were not told: %w", id, err)
	}
	return s.GetWorkflow(ctx, id)
}
