package redis

import (
	"context"
	"fmt"
	"strconv"

	"github.com/pronto-jobs/pronto/store"
)

// scriptSetPriority sets the priority of job ARGV[1] to ARGV[2] when it waits to run (available,
// scheduled, pending). An available job is filed out and in again (unplace, place), so the member
// of its kind's (or tenant's) source, rank(prio, due)..id, is rebuilt as an insert builds it; the
// others are filed by due time or not at all and read the priority when they become available.
// Returns {'ok', 0, job, previous priority}, {'nf'} or {'bad', state}.
var scriptSetPriority = newFunc("SetPriority", `
local id, prio = ARGV[1], tonumber(ARGV[2])
local k = jk(id)
local f = fields(id)
if not f then return {'nf'} end
local st = f.state
if st ~= 'available' and st ~= 'scheduled' and st ~= 'pending' then return {'bad', st} end
local prev = num(f.prio)
if prev ~= prio then
  if st == 'available' then unplace(id, f) end
  redis.call('HSET', k, 'prio', s(prio))
  f.prio = s(prio)
  if st == 'available' then place(id, f) end
end
return {'ok', 0, redis.call('HGETALL', k), s(prev)}
`)

// SetJobPriority sets the priority of an available, scheduled or pending job in one script; an
// available job's place in its queue's claim order is rebuilt in the same call.
func (s *Store) SetJobPriority(ctx context.Context, id string, priority int) (*store.Job, int, error) {
	op := store.OpChangePriority
	if err := store.CheckPriority(priority); err != nil {
		return nil, 0, fmt.Errorf("redis: %s job %s: %w", op, id, err)
	}
	q, err := s.queueOf(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	res, err := scriptSetPriority.Run(ctx, s.rdb, s.keys(q), id, priority).Slice()
	if err != nil {
		return nil, 0, fmt.Errorf("redis: %s job %s: %w", op, id, err)
	}
	switch res[0] {
	case "nf":
		return nil, 0, notFound(id)
	case "bad":
		st, _ := res[1].(string)
		return nil, 0, &store.TransitionError{JobID: id, Operation: op, From: store.State(st)}
	}
	j, err := decodeFlat(res[2])
	if err != nil {
		return nil, 0, fmt.Errorf("redis: %s job %s: %w", op, id, err)
	}
	v, _ := res[3].(string)
	prev, err := strconv.Atoi(v)
	if err != nil {
		return nil, 0, fmt.Errorf("redis: %s job %s: previous priority %q: %w", op, id, v, err)
	}
	return j, prev, nil
}

// CountAvailableByPriority returns how many available jobs of queue wait at each priority: one
// read-only function call over the queue's ready sets, two commands per set and priority present.
func (s *Store) CountAvailableByPriority(ctx context.Context, queue string) (map[int]int64, error) {
	vals, err := scriptAvailableByPriority.Run(ctx, s.rdb, s.keys(queue)).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("redis: count available jobs of queue %q by priority: %w", queue, err)
	}
	out := make(map[int]int64, len(vals)/2)
	for i := 0; i+1 < len(vals); i += 2 {
		out[int(vals[i])] = vals[i+1]
	}
	return out, nil
}
