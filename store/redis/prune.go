package redis

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto/store"
)

var (
	_ store.DiscardedPruner   = (*Store)(nil)
	_ store.DiscardedArchiver = (*Store)(nil)
)

// scriptPruneIDs deletes the jobs of one queue given as ARGV pairs (id, completion time in µs)
// that are still prunable (see prunable: discarded with that completion time, waited for by no
// pending child), and returns {their ids, the workflows gone with their last job} (the caller
// removes them from the global id and workflow indexes).
var scriptPruneIDs = newFreeingFunc("PruneIDs", `
local gone = {}
for i = 1, #ARGV, 2 do
  local id = ARGV[i]
  if prunable(id, ARGV[i + 1]) then
    drop(id, unplace(id))
    gone[#gone + 1] = id
  end
end
return {gone, dropped}
`)

// scriptPrunableJobs returns the whole hash (HGETALL) of each job of one queue given as ARGV pairs
// like scriptPruneIDs' that scriptPruneIDs would delete: the check and the read in one atomic step,
// so PruneCandidates names exactly what a pass would delete.
var scriptPrunableJobs = newReadFunc("PrunableJobs", `
local out = {}
for i = 1, #ARGV, 2 do
  if prunable(ARGV[i], ARGV[i + 1]) then out[#out + 1] = redis.call('HGETALL', jk(ARGV[i])) end
end
return out
`)

// pruneEntry is a discarded job a prune pass takes: its queue, its id, and its score in the
// queue's done:discarded set (completion time, µs, as micros writes it), which the scripts check
// again so that only the version selected is deleted.
type pruneEntry struct {
	queue, id, at string
}

// PruneDiscarded deletes discarded jobs of the queues p covers finished before p.Before and, oldest
// first, those beyond the newest p.Keep of them, at most p.Limit (see store.DiscardedPruner); a
// workflow job a pending child still waits for is kept.
func (s *Store) PruneDiscarded(ctx context.Context, p store.PruneParams) (map[string]int, error) {
	sel, err := s.pruneSelect(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("redis: prune discarded jobs: %w", err)
	}
	return s.pruneEntries(ctx, sel)
}

// PruneCandidates returns the discarded jobs PruneDiscarded(ctx, p) would delete now, oldest first
// (see store.DiscardedArchiver): the same selection, read instead of deleted.
func (s *Store) PruneCandidates(ctx context.Context, p store.PruneParams) ([]*store.Job, error) {
	sel, err := s.pruneSelect(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("redis: read the discarded jobs to prune: %w", err)
	}
	var jobs []*store.Job
	for q, args := range pruneArgs(sel) {
		res, err := scriptPrunableJobs.Run(ctx, s.rdb, s.keys(q), args...).Slice()
		if err != nil {
			return nil, fmt.Errorf("redis: read the discarded jobs of %s to prune: %w", q, err)
		}
		for _, v := range res {
			j, err := decodeFlat(v)
			if err != nil {
				return nil, err
			}
			if j != nil { // a hash gone while its id stayed (an evicting maxmemory policy)
				jobs = append(jobs, j)
			}
		}
	}
	slices.SortFunc(jobs, func(a, b *store.Job) int {
		if c := a.CompletedAt.Compare(b.CompletedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return jobs, nil
}

// DeleteDiscarded deletes each of jobs still discarded with the CompletedAt it carries and waited
// for by no pending child (see store.DiscardedArchiver), one script call per queue.
func (s *Store) DeleteDiscarded(ctx context.Context, jobs []*store.Job) (map[string]int, error) {
	sel := make([]pruneEntry, 0, len(jobs))
	for _, j := range jobs {
		if j != nil {
			sel = append(sel, pruneEntry{j.Queue, j.ID, micros(j.CompletedAt)})
		}
	}
	return s.pruneEntries(ctx, sel)
}

// pruneEntries deletes the entries still prunable, each queue's in one script call (one slot), and
// counts them per queue.
func (s *Store) pruneEntries(ctx context.Context, sel []pruneEntry) (map[string]int, error) {
	out := map[string]int{}
	for q, args := range pruneArgs(sel) {
		gone, err := s.deleted(ctx, scriptPruneIDs.Run(ctx, s.rdb, s.keys(q), args...))
		if err != nil {
			return out, fmt.Errorf("redis: prune discarded jobs of %s: %w", q, err)
		}
		if len(gone) > 0 {
			out[q] += len(gone)
		}
	}
	return out, nil
}

// pruneArgs groups entries by queue as the prune scripts' ARGV: id, completion time pairs.
func pruneArgs(sel []pruneEntry) map[string][]any {
	args := map[string][]any{}
	for _, e := range sel {
		args[e.queue] = append(args[e.queue], e.id, e.at)
	}
	return args
}

// scriptWaitedAmong returns those of the jobs ARGV (of one queue) that a pending child waits for:
// pruneSelect passes over them without counting them against its limit.
var scriptWaitedAmong = newReadFunc("WaitedAmong", `
local out = {}
for i = 1, #ARGV do
  if waited(ARGV[i]) then out[#out + 1] = ARGV[i] end
end
return out
`)

// pruneSelect returns the entries of the done:discarded sets of the queues p covers that a pass p
// takes, oldest first (by completion time, then id): those finished before p.Before and those
// beyond the newest p.Keep, at most p.Limit, passing over the jobs a pending child waits for
// without counting them against the limit (a batch's failed jobs waiting for its callback would
// otherwise use it up at every pass). In that order each bound takes a prefix of the covered
// entries, so their union is the longer prefix: one round trip reads each set's size and count
// before p.Before, a second the oldest entries each set may contribute, merged across queues, and
// a third which of those are waited for (when some are, the second and third are done again, at
// most four times, with the sets read that much further); no scan, and nothing is deleted.
func (s *Store) pruneSelect(ctx context.Context, p store.PruneParams) ([]pruneEntry, error) {
	if p.Before.IsZero() && p.Keep <= 0 {
		return nil, nil
	}
	limit := int64(p.Limit)
	if limit <= 0 {
		limit = defaultLimit
	}
	all, err := s.queues(ctx)
	if err != nil {
		return nil, err
	}
	qs := all[:0:0]
	for _, q := range all {
		if p.Prunes(q) {
			qs = append(qs, q)
		}
	}
	if len(qs) == 0 {
		return nil, nil
	}
	key := func(q string) string { return s.qkey(q) + "done:discarded" }
	cut := "(" + micros(p.Before)
	cards := make([]*goredis.IntCmd, len(qs))
	olds := make([]*goredis.IntCmd, len(qs))
	if _, err := s.rdb.Pipelined(ctx, func(pl goredis.Pipeliner) error {
		for i, q := range qs {
			if p.Keep > 0 {
				cards[i] = pl.ZCard(ctx, key(q))
			}
			if !p.Before.IsZero() {
				olds[i] = pl.ZCount(ctx, key(q), "-inf", cut)
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	// excess is how many of the oldest entries the count bound takes, waited for or not.
	excess := int64(0)
	if p.Keep > 0 {
		for _, c := range cards {
			excess += c.Val()
		}
		excess = max(excess-int64(p.Keep), 0)
	}
	waited := map[string]bool{}   // ids a pending child waits for
	skipped := map[string]int64{} // per queue, how many of them its range holds
	var sel []pruneEntry
	for round := 0; round < 4; round++ {
		ranges := make([]*goredis.ZSliceCmd, len(qs))
		if _, err := s.rdb.Pipelined(ctx, func(pl goredis.Pipeliner) error {
			for i, q := range qs {
				n := excess
				if olds[i] != nil {
					n = max(n, olds[i].Val())
				}
				if n = min(n, limit+skipped[q]); n > 0 {
					ranges[i] = pl.ZRangeWithScores(ctx, key(q), 0, n-1)
				}
			}
			return nil
		}); err != nil {
			return nil, err
		}
		sel = takeOldest(qs, ranges, waited, excess, limit, p.Before)
		found, err := s.waitedAmong(ctx, sel)
		if err != nil {
			return nil, err
		}
		if len(found) == 0 {
			return sel, nil
		}
		for _, e := range found {
			waited[e.id] = true
			skipped[e.queue]++
		}
	}
	// Still some waited for after four rounds: the delete script keeps them anyway.
	return sel, nil
}

// takeOldest merges the queues' ranges oldest first and takes at most limit entries that are not
// waited for, among the first excess of all (the count bound) or finished before before.
func takeOldest(qs []string, ranges []*goredis.ZSliceCmd, waited map[string]bool, excess, limit int64, before time.Time) []pruneEntry {
	type scored struct {
		pruneEntry
		score float64
	}
	var oldest []scored
	for i, q := range qs {
		if ranges[i] == nil {
			continue
		}
		for _, z := range ranges[i].Val() {
			oldest = append(oldest, scored{pruneEntry{q, fmt.Sprint(z.Member), strconv.FormatFloat(z.Score, 'f', -1, 64)}, z.Score})
		}
	}
	slices.SortFunc(oldest, func(a, b scored) int {
		if c := cmp.Compare(a.score, b.score); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	cutoff := float64(before.UnixMicro())
	sel := make([]pruneEntry, 0, min(int64(len(oldest)), limit))
	for pos, e := range oldest {
		if int64(len(sel)) >= limit || (int64(pos) >= excess && (before.IsZero() || e.score >= cutoff)) {
			break
		}
		if !waited[e.id] {
			sel = append(sel, e.pruneEntry)
		}
	}
	return sel
}

// waitedAmong returns the entries of sel that a pending child waits for, one script call per
// queue.
func (s *Store) waitedAmong(ctx context.Context, sel []pruneEntry) ([]pruneEntry, error) {
	byQueue := map[string][]any{}
	for _, e := range sel {
		byQueue[e.queue] = append(byQueue[e.queue], e.id)
	}
	var out []pruneEntry
	for q, ids := range byQueue {
		res, err := scriptWaitedAmong.Run(ctx, s.rdb, s.keys(q), ids...).StringSlice()
		if err != nil {
			return nil, fmt.Errorf("redis: prune discarded jobs of %s: %w", q, err)
		}
		for _, id := range res {
			out = append(out, pruneEntry{queue: q, id: id})
		}
	}
	return out, nil
}
