package redis

import (
	"context"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto/store"
)

var _ store.UniqueHolder = (*Store)(nil)

// scriptHeldUnique returns, for each unique key ARGV of one queue, the id of the job holding it now
// (an empty string for none): the holder an insert would meet (see holder), read at one instant of the server's
// clock. It changes nothing.
var scriptHeldUnique = newReadFunc("HeldUnique", `
local t = now()
local out = {}
for i, uk in ipairs(ARGV) do out[i] = holder(uk, t) or '' end
return out
`)

// HeldUniqueKeys returns, for each of refs held now, the id of the job holding it (see
// store.UniqueHolder). Keys are per queue on Redis, so each ref is looked up in its own queue's
// slot: one script call per queue, all in one pipeline (one round trip on a single node; one per
// node of a cluster, sent together).
func (s *Store) HeldUniqueKeys(ctx context.Context, refs []store.UniqueKeyRef) (map[store.UniqueKeyRef]string, error) {
	out := map[store.UniqueKeyRef]string{}
	byQueue := map[string][]string{}
	var queues []string
	seen := map[store.UniqueKeyRef]bool{}
	for _, r := range refs {
		if r.Key == "" || seen[r] {
			continue
		}
		seen[r] = true
		if _, ok := byQueue[r.Queue]; !ok {
			queues = append(queues, r.Queue)
		}
		byQueue[r.Queue] = append(byQueue[r.Queue], r.Key)
	}
	if len(queues) == 0 {
		return out, nil
	}
	cmds := make([]*goredis.Cmd, len(queues))
	err := s.pipelined(ctx, func(_ goredis.Pipeliner, run runScript) error {
		for i, q := range queues {
			keys := byQueue[q]
			args := make([]any, len(keys))
			for j, k := range keys {
				args[j] = k
			}
			cmds[i] = run(scriptHeldUnique, s.keys(q), args...)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redis: read the holders of %d unique keys: %w", len(seen), err)
	}
	for i, q := range queues {
		ids, err := cmds[i].StringSlice()
		if err != nil {
			return nil, fmt.Errorf("redis: read the holders of unique keys in queue %q: %w", q, err)
		}
		for j, k := range byQueue[q] {
			if j < len(ids) && ids[j] != "" {
				out[store.UniqueKeyRef{Queue: q, Key: k}] = ids[j]
			}
		}
	}
	return out, nil
}
