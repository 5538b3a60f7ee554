package redis

import (
	"context"
	"fmt"

	"github.com/pronto-jobs/pronto/store"
)

// SetRateLimit is not implemented yet on Redis.
func (s *Store) SetRateLimit(ctx context.Context, key string, l store.RateLimit) error {
	return fmt.Errorf("redis: rate limits: %w", store.ErrUnsupported)
}

// GetRateLimit is not implemented yet on Redis.
func (s *Store) GetRateLimit(ctx context.Context, key string) (*store.RateLimitInfo, error) {
	return nil, fmt.Errorf("redis: rate limits: %w", store.ErrUnsupported)
}

// ListRateLimits is not implemented yet on Redis.
func (s *Store) ListRateLimits(ctx context.Context) ([]*store.RateLimitInfo, error) {
	return nil, fmt.Errorf("redis: rate limits: %w", store.ErrUnsupported)
}

// DeleteRateLimit is not implemented yet on Redis.
func (s *Store) DeleteRateLimit(ctx context.Context, key string) error {
	return fmt.Errorf("redis: rate limits: %w", store.ErrUnsupported)
}

// InsertWorkflow is not implemented yet on Redis.
func (s *Store) InsertWorkflow(ctx context.Context, p store.WorkflowParams) (*store.Workflow, []*store.Job, error) {
	return nil, nil, fmt.Errorf("redis: workflows: %w", store.ErrUnsupported)
}

// GetWorkflow is not implemented yet on Redis.
func (s *Store) GetWorkflow(ctx context.Context, id string) (*store.Workflow, error) {
	return nil, fmt.Errorf("redis: workflows: %w", store.ErrUnsupported)
}

// CancelWorkflow is not implemented yet on Redis.
func (s *Store) CancelWorkflow(ctx context.Context, id string) (*store.Workflow, error) {
	return nil, fmt.Errorf("redis: workflows: %w", store.ErrUnsupported)
}
