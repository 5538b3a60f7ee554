package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/pronto-jobs/pronto/store"
)

// SetProgress records p for the job's current run when it is active (see scriptProgress).
func (s *Store) SetProgress(ctx context.Context, p store.ProgressParams) (bool, error) {
	q, err := s.queueOf(ctx, p.ID)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	val := ""
	if p.Value != nil {
		val = strconv.FormatFloat(*p.Value, 'g', -1, 64)
	}
	dataFlag, data := "", ""
	if p.Data != nil {
		dataFlag, data = "1", string(p.Data)
	}
	n, err := scriptProgress.Run(ctx, s.rdb, s.keys(q), p.ID, p.Token, val, dataFlag, data).Int()
	if err != nil {
		return false, fmt.Errorf("redis: progress of job %s: %w", p.ID, err)
	}
	if n == 1 && p.Checkpoint != nil {
		// A second script only for reports that carry a checkpoint (few): under the same
		// conditions, so a checkpoint is never saved by a run that no longer holds the job.
		if _, err := scriptCheckpoint.Run(ctx, s.rdb, s.keys(q), p.ID, p.Token, string(p.Checkpoint)).Int(); err != nil {
			return false, fmt.Errorf("redis: checkpoint of job %s: %w", p.ID, err)
		}
	}
	return n == 1, nil
}

// scriptCheckpoint saves a job's checkpoint (ARGV: id, token or "", checkpoint) in the job's hash
// (pckpt) while the job is active (under the token, when given). Unlike the progress fields it is
// kept across runs. Returns 1 when saved.
var scriptCheckpoint = newFunc("Checkpoint", `
local k = jk(ARGV[1])
local f = redis.call('HMGET', k, 'state', 'token')
if f[1] ~= 'active' or (ARGV[2] ~= '' and f[2] ~= ARGV[2]) then return 0 end
redis.call('HSET', k, 'pckpt', ARGV[3])
return 1
`)

// GetProgress returns the latest progress reported for the job, or nil.
func (s *Store) GetProgress(ctx context.Context, id string) (*store.Progress, error) {
	q, err := s.queueOf(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	f, err := s.rdb.HMGet(ctx, s.jobKey(q, id), "prun", "pval", "pdata", "pat", "pckpt").Result()
	if err != nil {
		return nil, fmt.Errorf("redis: progress of job %s: %w", id, err)
	}
	run, _ := f[0].(string)
	if run == "" {
		return nil, nil
	}
	p := &store.Progress{RunStartedAt: fromMicros(run)}
	if v, ok := f[1].(string); ok {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("redis: progress of job %s: value %q", id, v)
		}
		p.Value = &x
	}
	if d, ok := f[2].(string); ok {
		p.Data = []byte(d)
	}
	if at, ok := f[3].(string); ok {
		p.UpdatedAt = fromMicros(at)
	}
	if c, ok := f[4].(string); ok {
		p.Checkpoint = []byte(c)
	}
	return p, nil
}

// GetProgressBatch returns the progress of each of ids that has any, one job at a time.
func (s *Store) GetProgressBatch(ctx context.Context, ids []string) (map[string]*store.Progress, error) {
	return store.GetProgressEach(ctx, s, ids)
}
