package redis

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto/store"
)

var _ store.DiscardedPruner = (*Store)(nil)

// scriptPruneIDs deletes the jobs ARGV[1..] of one queue that are still discarded (in its
// done:discarded set), and returns {their ids, the workflows gone with their last job} (the caller
// removes them from the global id and workflow indexes).
var scriptPruneIDs = newFunc("PruneIDs", `
local gone = {}
for i = 1, #ARGV do
  local id = ARGV[i]
  if redis.call('ZSCORE', B .. 'done:discarded', id) then
    local wf = redis.call('HMGET', jk(id), 'wf', 'wfl')
    unplace(id)
    redis.call('DEL', jk(id))
    forget(id, wf[1], wf[2])
    gone[#gone + 1] = id
  end
end
return {gone, dropped}
`)

// PruneDiscarded deletes discarded jobs of the queues p covers finished before p.Before and, oldest
// first, those beyond the newest p.Keep of them, at most p.Limit (see store.DiscardedPruner). Every queue keeps its
// discarded jobs in a set scored by completion time: the count bound reads the sets' sizes and the
// oldest p.Limit entries of each, merged across queues; no scan.
func (s *Store) PruneDiscarded(ctx context.Context, p store.PruneParams) (map[string]int, error) {
	out := map[string]int{}
	if p.Before.IsZero() && p.Keep <= 0 {
		return out, nil
	}
	left := p.Limit
	if left <= 0 {
		left = defaultLimit
	}
	all, err := s.queues(ctx)
	if err != nil {
		return nil, fmt.Errorf("redis: prune discarded jobs: %w", err)
	}
	qs := all[:0:0]
	for _, q := range all {
		if p.Prunes(q) {
			qs = append(qs, q)
		}
	}
	drop := func(q string, gone []string) {
		if len(gone) == 0 {
			return
		}
		out[q] += len(gone)
		left -= len(gone)
	}
	if !p.Before.IsZero() {
		for _, q := range qs {
			if left <= 0 {
				break
			}
			gone, err := s.deleted(ctx, scriptCleanup.Run(ctx, s.rdb, s.keys(q), "0", "0", micros(p.Before), left))
			if err != nil {
				return out, fmt.Errorf("redis: prune discarded jobs of %s: %w", q, err)
			}
			drop(q, gone)
		}
	}
	if p.Keep <= 0 || left <= 0 {
		return out, nil
	}
	cards := make([]*goredis.IntCmd, len(qs))
	pipe := s.rdb.Pipeline()
	for i, q := range qs {
		cards[i] = pipe.ZCard(ctx, s.qkey(q)+"done:discarded")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return out, fmt.Errorf("redis: prune discarded jobs: %w", err)
	}
	total := int64(0)
	for _, c := range cards {
		total += c.Val()
	}
	n := min(total-int64(p.Keep), int64(left))
	if n <= 0 {
		return out, nil
	}
	type entry struct {
		queue, id string
		at        float64
	}
	var oldest []entry
	for i, q := range qs {
		if cards[i].Val() == 0 {
			continue
		}
		zs, err := s.rdb.ZRangeWithScores(ctx, s.qkey(q)+"done:discarded", 0, n-1).Result()
		if err != nil {
			return out, fmt.Errorf("redis: prune discarded jobs of %s: %w", q, err)
		}
		for _, z := range zs {
			oldest = append(oldest, entry{q, fmt.Sprint(z.Member), z.Score})
		}
	}
	slices.SortFunc(oldest, func(a, b entry) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	perQueue := map[string][]any{}
	for _, e := range oldest[:min(int64(len(oldest)), n)] {
		perQueue[e.queue] = append(perQueue[e.queue], e.id)
	}
	for q, ids := range perQueue {
		gone, err := s.deleted(ctx, scriptPruneIDs.Run(ctx, s.rdb, s.keys(q), ids...))
		if err != nil {
			return out, fmt.Errorf("redis: prune discarded jobs of %s: %w", q, err)
		}
		drop(q, gone)
	}
	return out, nil
}
