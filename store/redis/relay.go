package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto/store"
)

// Workflows split over a Redis Cluster's queues. A workflow whose jobs all share one queue keeps
// its keys in that queue's slot, and every step of it is one script there (features.go). One whose
// jobs span queues spans slots, and no script can release a child in another slot in the same
// atomic step as its parent's outcome. Such a workflow is split instead into one part per queue:
//
//   - Each part is a workflow of the queue-tagged layout in its queue's slot: the workflow's hash
//     (counting that queue's jobs) and its job set, with that queue's jobs. GetWorkflow sums the
//     parts; ListJobs merges their job sets; CancelWorkflow cancels each part.
//   - A job's children in its own queue are its field kids, as in any workflow; those in other queues
//     are its field xkids (JSON: queue -> ids joined by ","). When the job ends, the script that ended
//     it writes its state and result into its queue's workflow outbox (<queue prefix>wfout, a list),
//     one entry per queue of children, in the same atomic step as the outcome, and tells its caller
//     (relay in the scripts).
//   - Store.relay delivers the entries: scriptDeliver, in the children's queue, records the parent's
//     state and result in that queue's part (fields ps:<id> and pr:<id>, which decide and results
//     read for a parent not in the queue) and decides the children as a single-queue workflow's
//     script would; only then is the entry removed from the outbox. A delivery is idempotent (a
//     child is decided only while pending), so an entry delivered twice (two relays at once, or a
//     relay that died before removing it) changes nothing the second time.
//   - Every script that can end a job reports when it wrote to the outbox, and its caller relays at
//     once. The finish script's reply carries the entries themselves, so Finish delivers them
//     without reading the outbox and removes them in the background: a child in another queue is
//     released one round trip after its parent's outcome. A process that dies between the two leaves the entry in the outbox, durable like the
//     outcome itself; Rescue relays every outbox with entries (the queues with parts are in the set
//     <prefix>wfx), so the child is released within one rescue interval.
//
// Inserting is two steps too. Each part is written with its roots held (state pending, field hold
// keeping their state), so that no job can end, and no outcome be delivered, before every part
// exists; then scriptReleaseHeld makes the roots of each part claimable. A writer that fails between
// the parts deletes what it wrote (scriptDropPart) and gives the registration back; one that dies
// leaves its registration pending, and Cleanup (sweepRegistrations) finishes the workflow when every
// part was written, or deletes the parts written otherwise. Nothing of a split workflow runs until
// all of it is stored.

// splitMark starts a workflow index value naming the queues of a split workflow, each after a
// splitMark (queue names never hold a newline through pronto's API; a store-level queue name with
// one cannot be in a split workflow, see InsertWorkflow).
const splitMark = "\n"

// splitValue is the workflow index value of a workflow split over queues.
func splitValue(queues []string) string { return splitMark + strings.Join(queues, splitMark) }

// splitQueues returns the queues of a split workflow's index value, nil for another layout.
func splitQueues(v string) []string {
	if !strings.HasPrefix(v, splitMark) {
		return nil
	}
	return strings.Split(v[len(splitMark):], splitMark)
}

// splitSetKey is the set of the queues that hold parts of split workflows, whose outboxes Rescue
// relays.
func (s *Store) splitSetKey() string { return s.prefix + "wfx" }

// outboxKey is queue's workflow outbox.
func (s *Store) outboxKey(queue string) string { return s.qkey(queue) + "wfout" }

// scriptDeliver delivers outbox entries to the children's queue (KEYS[1]). ARGV: per entry five
// values: workflow id, parent id, its state, its result ("" for none), the children's ids joined by
// ",". The parent's state and result go into the queue's part of the workflow (when the part still
// exists), and each child still pending is decided. Returns {released, relay}: the queue where
// children were released ("" for none, to be announced) and 1 when this queue's own outbox is to be
// relayed in turn (children it cancelled have children in other queues).
var scriptDeliver = newFunc("Deliver", `
local t = now()
for i = 1, #ARGV, 5 do
  local w = B .. 'wf:' .. ARGV[i]
  if redis.call('EXISTS', w) == 1 then
    redis.call('HSET', w, 'ps:' .. ARGV[i + 1], ARGV[i + 2], 'pr:' .. ARGV[i + 1], ARGV[i + 3])
    for kid in string.gmatch(ARGV[i + 4], '[^,]+') do settlekid(kid, B, B, nil, t, {}, ARGV[i + 2]) end
  end
end
settle(t)
return {released or '', relay and 1 or 0}
`)

// scriptReleaseHeld makes the held jobs of workflow ARGV[1]'s part in this queue (KEYS[1]) what
// they were inserted as (available or scheduled), and returns how many it released. A held job no
// longer pending (cancelled meanwhile) stays as it is.
var scriptReleaseHeld = newFunc("ReleaseHeld", `
local n = 0
for _, id in ipairs(redis.call('ZRANGE', B .. 'wfj:' .. ARGV[1], 0, -1)) do
  local f = redis.call('HMGET', jk(id), 'state', 'hold')
  if f[2] then
    if f[1] == 'pending' then
      unplace(id)
      redis.call('HSET', jk(id), 'state', f[2])
      place(id)
      n = n + 1
    end
    redis.call('HDEL', jk(id), 'hold')
  end
end
return n
`)

// scriptDropPart deletes workflow ARGV[1]'s part in this queue (KEYS[1]) whose writer failed or
// died before releasing it: its jobs still pending (all of them, as nothing of it ran) and its keys.
// Returns how many jobs it deleted.
var scriptDropPart = newFunc("DropPart", `
local gone = 0
for _, id in ipairs(redis.call('ZRANGE', B .. 'wfj:' .. ARGV[1], 0, -1)) do
  if redis.call('HGET', jk(id), 'state') == 'pending' then
    drop(id, unplace(id))
    gone = gone + 1
  end
end
return gone
`)

// relayEntry is one outbox entry (see outbox in the scripts).
type relayEntry struct {
	Queue    string `json:"q"`
	Workflow string `json:"w"`
	Parent   string `json:"p"`
	State    string `json:"s"`
	Result   string `json:"r"`
	Kids     string `json:"k"`
}

// relayBatch is how many entries of one outbox a relay round delivers.
const relayBatch = 200

// relay delivers the workflow outboxes of queues (see above), and of the queues where that
// cancelled children with children elsewhere in turn, announcing the queues where children were
// released. It stops after a bounded number of rounds; what is left waits for the next relay.
func (s *Store) relay(ctx context.Context, queues ...string) error {
	todo := slices.Clone(queues)
	for round := 0; len(todo) > 0 && round < 64; round++ {
		q := todo[0]
		todo = todo[1:]
		more, err := s.relayOnce(ctx, q)
		if err != nil {
			return fmt.Errorf("redis: relay workflow outcomes of queue %s: %w", q, err)
		}
		for _, m := range more {
			if !slices.Contains(todo, m) {
				todo = append(todo, m)
			}
		}
	}
	return nil
}

// relayed is what one script wrote to its queue's outbox.
type relayed struct {
	queue   string
	entries []string
}

// relayMarker precedes, in the finish and claim scripts' replies, the outbox entries they wrote.
const relayMarker = "\nrelay"

// relayOnce delivers up to relayBatch entries of queue's outbox and removes them, and returns the
// queues to relay next (their deliveries wrote to their outboxes, or queue has more entries).
func (s *Store) relayOnce(ctx context.Context, queue string) ([]string, error) {
	raw, err := s.rdb.LRange(ctx, s.outboxKey(queue), 0, relayBatch-1).Result()
	if err != nil || len(raw) == 0 {
		return nil, err
	}
	next, err := s.deliverEntries(ctx, queue, raw)
	if err != nil {
		return nil, err
	}
	if err := s.dropEntries(ctx, queue, raw); err != nil {
		return nil, err
	}
	if len(raw) == relayBatch {
		next = append(next, queue)
	}
	return next, nil
}

// deliver delivers entries that a script of queue wrote to its outbox and reported in its reply
// (so the outbox is not read), then relays the queues where that wrote entries in turn. The entries
// leave the outbox in the background, off the caller's path: one delivered again meanwhile (by
// Rescue) changes nothing, and Close waits for the removal.
func (s *Store) deliver(ctx context.Context, queue string, entries []string) error {
	next, err := s.deliverEntries(ctx, queue, entries)
	if err != nil {
		return fmt.Errorf("redis: relay workflow outcomes of queue %s: %w", queue, err)
	}
	s.relayWG.Add(1)
	go func() {
		defer s.relayWG.Done()
		bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := s.dropEntries(bg, queue, entries); err != nil {
			s.logf("redis: relay: removing delivered entries of queue %s (Rescue delivers them again, to no effect): %v", queue, err)
		}
	}()
	return s.relay(ctx, next...)
}

// deliverEntries delivers outbox entries of queue (scriptDeliver, one pipelined call per children's
// queue), announces the queues where children were released, and returns the queues whose outboxes
// the deliveries wrote to.
func (s *Store) deliverEntries(ctx context.Context, queue string, raw []string) ([]string, error) {
	var order []string
	args := map[string][]any{}
	for _, r := range raw {
		var e relayEntry
		if err := json.Unmarshal([]byte(r), &e); err != nil || e.Queue == "" {
			// Only the scripts write entries; one that does not decode is dropped with the others,
			// said here.
			s.logf("redis: relay: dropping an undecodable outbox entry of queue %s: %q", queue, r)
			continue
		}
		if _, ok := args[e.Queue]; !ok {
			order = append(order, e.Queue)
		}
		args[e.Queue] = append(args[e.Queue], e.Workflow, e.Parent, e.State, e.Result, e.Kids)
	}
	cmds := make([]*goredis.Cmd, len(order))
	err := s.pipelined(ctx, func(_ goredis.Pipeliner, run runScript) error {
		for i, to := range order {
			cmds[i] = run(scriptDeliver, s.keys(to), args[to]...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var next []string
	var ns []store.Notification
	for i, c := range cmds {
		res, err := c.Slice()
		if err != nil {
			return nil, fmt.Errorf("deliver to queue %s: %w", order[i], err)
		}
		if len(res) < 2 {
			return nil, fmt.Errorf("deliver to queue %s: unexpected reply %v", order[i], res)
		}
		if released, _ := res[0].(string); released != "" {
			ns = append(ns, store.Notification{Kind: store.NotifyInsert, Queue: released, Nonce: nonce()})
		}
		if more, _ := res[1].(int64); more == 1 {
			next = append(next, order[i])
		}
	}
	return next, s.publish(ctx, ns)
}

// dropEntries removes delivered entries from queue's outbox.
func (s *Store) dropEntries(ctx context.Context, queue string, raw []string) error {
	_, err := s.rdb.Pipelined(ctx, func(pl goredis.Pipeliner) error {
		for _, r := range raw {
			pl.LRem(ctx, s.outboxKey(queue), 1, r)
		}
		return nil
	})
	return err
}

// relayAll relays every outbox that has entries, of the queues holding parts of split workflows:
// what a process that died between an outcome and its relay left.
func (s *Store) relayAll(ctx context.Context) error {
	qs, err := s.rdb.SMembers(ctx, s.splitSetKey()).Result()
	if err != nil || len(qs) == 0 {
		return err
	}
	lens := make([]*goredis.IntCmd, len(qs))
	_, err = s.rdb.Pipelined(ctx, func(pl goredis.Pipeliner) error {
		for i, q := range qs {
			lens[i] = pl.LLen(ctx, s.outboxKey(q))
		}
		return nil
	})
	if err != nil {
		return err
	}
	var full []string
	for i, q := range qs {
		if lens[i].Val() > 0 {
			full = append(full, q)
		}
	}
	return s.relay(ctx, full...)
}

// splitPartArgs returns the arguments of scriptInsertWorkflow for workflow p's part in queue q
// (after the workflow's own arguments): its jobs, with their children in q as kids and those in
// other queues as xkids, and their roots held (see above).
func splitPartArgs(p store.WorkflowParams, q string, kids map[string][]string, queueOf map[string]string) ([]any, int, error) {
	var args []any
	n := 0
	for _, jp := range p.Jobs {
		if jp.Queue != q {
			continue
		}
		n++
		f := insertFields(jp, true)
		var own []string
		other := map[string]string{}
		for _, k := range kids[jp.ID] {
			if kq := queueOf[k]; kq == q {
				own = append(own, k)
			} else if other[kq] == "" {
				other[kq] = k
			} else {
				other[kq] += "," + k
			}
		}
		if len(own) > 0 {
			f = append(f, "kids", strings.Join(own, ","))
		}
		if len(other) > 0 {
			b, err := json.Marshal(other)
			if err != nil {
				return nil, 0, err
			}
			f = append(f, "xkids", string(b))
		}
		if jp.State != store.StatePending {
			for i := 0; i+1 < len(f); i += 2 {
				if f[i] == "state" {
					f[i+1] = string(store.StatePending)
				}
			}
			f = append(f, "hold", string(jp.State))
		}
		f = append(f, "wfl", "1")
		args = append(args, jp.Queue, jp.ID, jp.RateKey, "", len(f)/2)
		args = append(args, f...)
	}
	return args, n, nil
}

// insertSplit writes workflow p's parts (one per queue, roots held), then releases them, and
// returns the server's time of the write; head is the workflow's own arguments of
// scriptInsertWorkflow, reg its registration's (see writeWorkflow). When a part is not known written
// it deletes the parts written and undoes the registration (or, when it cannot delete them, leaves
// both to Cleanup). Once every part is written the workflow stands: the release is not cancelled
// with ctx, and is sent once more should its reply be lost (it is idempotent); should it still fail,
// the registration is left to Cleanup, which releases the held roots. Deleting the parts then could
// delete a root released and claimed already, and give its id back.
func (s *Store) insertSplit(ctx context.Context, p store.WorkflowParams, queues []string, kids map[string][]string, head, reg []any) (any, error) {
	queueOf := make(map[string]string, len(p.Jobs))
	for _, jp := range p.Jobs {
		queueOf[jp.ID] = jp.Queue
	}
	cmds := make([]*goredis.Cmd, len(queues))
	err := s.pipelined(ctx, func(pl goredis.Pipeliner, run runScript) error {
		for i, q := range queues {
			part, n, err := splitPartArgs(p, q, kids, queueOf)
			if err != nil {
				return err
			}
			args := slices.Clone(head)
			args[6] = n // the part's jobs
			cmds[i] = run(scriptInsertWorkflow, s.keys(q), append(args, part...)...)
		}
		return nil
	})
	var now any
	for i := 0; err == nil && i < len(cmds); i++ {
		var res any
		if res, err = cmds[i].Result(); err == nil && res == "dup" {
			err = store.ErrDuplicate
		}
		now = res
	}
	bg := context.WithoutCancel(ctx)
	if err != nil {
		if derr := s.dropParts(bg, p.ID, queues); derr != nil {
			// The registration stays pending: Cleanup deletes the parts later.
			return nil, fmt.Errorf("%w (deleting the parts written: %v)", err, derr)
		}
		// Give the ids back, so a retry is not refused as a duplicate.
		s.undoRegistration(bg, reg)
		return nil, err
	}
	release := func(run runScript) {
		for _, q := range queues {
			run(scriptReleaseHeld, s.keys(q), p.ID)
		}
	}
	if err = s.pipelinedScripts(bg, release); err != nil && !isRedisError(err) {
		err = s.pipelinedScripts(bg, release)
	}
	if err != nil {
		return nil, fmt.Errorf("written, its first jobs not released (Cleanup releases them): %w", err)
	}
	return now, nil
}

// dropParts deletes the parts of split workflow id in queues (scriptDropPart). The caller then
// undoes the workflow's registration, which takes its entries out of the id and workflow indexes.
func (s *Store) dropParts(ctx context.Context, id string, queues []string) error {
	return s.pipelinedScripts(ctx, func(run runScript) {
		for _, q := range queues {
			run(scriptDropPart, s.keys(q), id)
		}
	})
}

// mergeParts merges the hashes of a split workflow's parts into one as a single part would hold
// it: counts summed, the latest finish and cancellation; nil when no part exists.
func mergeParts(parts []map[string]string) map[string]string {
	var out map[string]string
	for _, m := range parts {
		if m["id"] == "" {
			continue
		}
		if out == nil {
			out = maps.Clone(m)
			continue
		}
		for k, v := range m {
			switch {
			case strings.HasPrefix(k, "n:") || strings.HasPrefix(k, "c:"):
				out[k] = addCounts(out[k], v)
			case k == "lastdone" || k == "cancelled":
				if fromMicros(v).After(fromMicros(out[k])) {
					out[k] = v
				}
			}
		}
	}
	return out
}

// addCounts adds two counts as the scripts store them (decimal text).
func addCounts(a, b string) string {
	x, _ := strconv.Atoi(a)
	y, _ := strconv.Atoi(b)
	return strconv.Itoa(x + y)
}
