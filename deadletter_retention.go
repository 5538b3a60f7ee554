package pronto

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pronto-jobs/pronto/internal/isodur"
	"github.com/pronto-jobs/pronto/internal/maintenance"
	"github.com/pronto-jobs/pronto/store"
)

// DeadLetterRetention bounds one queue's dead letter jobs (its discarded jobs) in place of
// Config.DiscardedRetention and Config.DiscardedMaxCount (ojs-dead-letter.md 5.3): a billing queue
// can keep its failures for a year while the others keep them a week. Zero is no bound of that kind;
// at least one must be set, since the dead letter queue must stay bounded (5.2).
type DeadLetterRetention struct {
	// MaxAge deletes the queue's jobs discarded longer ago than this.
	MaxAge time.Duration
	// MaxCount keeps the queue's newest MaxCount discarded jobs and deletes the older ones.
	MaxCount int
	// PruningPolicy says what becomes of the jobs pruned (ojs-dead-letter.md 8.2); empty follows
	// the leader's Config.DeadLetterPruningPolicy.
	PruningPolicy PruningPolicy
}

// deadLetterRetentionKey is the setting that holds the queues' retentions, a JSON object by queue.
const deadLetterRetentionKey = "dead_letter.queue_retention"

// storedRetention is one queue's retention as the setting holds it (the spec's field names).
type storedRetention struct {
	MaxAge        string        `json:"max_age,omitempty"`
	MaxCount      int           `json:"max_count,omitempty"`
	PruningPolicy PruningPolicy `json:"pruning_policy,omitempty"`
}

// DeadLetterRetentions returns the queues that have a dead letter retention of their own. They are
// kept in the store, so that whichever client leads the cluster's cleanup applies them (every 30 s);
// the other queues follow the leader's Config.DiscardedRetention and DiscardedMaxCount together.
// It returns an error matching ErrUnsupported when the store keeps no settings.
func (c *Client) DeadLetterRetentions(ctx context.Context) (map[string]DeadLetterRetention, error) {
	ss, err := c.settingStore("dead letter retention per queue")
	if err != nil {
		return nil, err
	}
	stored, err := readSettingMap[storedRetention](ctx, ss, deadLetterRetentionKey)
	if err != nil {
		return nil, wrapOp("read the dead letter retentions", err)
	}
	out := make(map[string]DeadLetterRetention, len(stored))
	for q, r := range stored {
		if out[q], err = r.parse(q); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// parse reads the stored retention of queue q.
func (r storedRetention) parse(q string) (DeadLetterRetention, error) {
	var d time.Duration
	if r.MaxAge != "" {
		var err error
		if d, err = isodur.Parse(r.MaxAge); err != nil {
			return DeadLetterRetention{}, fmt.Errorf("pronto: the stored dead letter retention of queue %s: max_age %q: %w", q, r.MaxAge, err)
		}
	}
	return DeadLetterRetention{MaxAge: d, MaxCount: r.MaxCount, PruningPolicy: r.PruningPolicy}, nil
}

// storedDeadLetterRetention checks queue q's retention r and returns it as the setting holds it.
func (c *Client) storedDeadLetterRetention(q string, r DeadLetterRetention) (storedRetention, error) {
	if !ValidQueueName(q) {
		return storedRetention{}, invalidf("dead letter retention: queue %q: not a valid queue name", q)
	}
	if r.MaxAge < 0 || r.MaxCount < 0 || (r.MaxAge == 0 && r.MaxCount == 0) {
		return storedRetention{}, invalidf("dead letter retention of queue %s: MaxAge and MaxCount cannot be negative, and one must be set", q)
	}
	if err := r.PruningPolicy.check(c.cfg.DeadLetterArchive != nil); err != nil {
		return storedRetention{}, invalidf("dead letter retention of queue %s: %v", q, err)
	}
	s := storedRetention{MaxCount: r.MaxCount, PruningPolicy: r.PruningPolicy}
	if r.MaxAge > 0 {
		s.MaxAge = isodur.Format(r.MaxAge)
	}
	return s, nil
}

// DeadLetterRetentionsSet replaces every queue's dead letter retention with rs (empty or nil: every
// queue follows the client's bounds again). Each entry needs a valid queue name and at least one
// positive bound, and neither may be negative, and a PruningPolicy this client could apply
// (PruneArchive needs its Config.DeadLetterArchive); anything else is an error matching
// ErrInvalidArgs, and nothing is stored.
func (c *Client) DeadLetterRetentionsSet(ctx context.Context, rs map[string]DeadLetterRetention) error {
	ss, err := c.settingStore("dead letter retention per queue")
	if err != nil {
		return err
	}
	stored := make(map[string]storedRetention, len(rs))
	for q, r := range rs {
		if stored[q], err = c.storedDeadLetterRetention(q, r); err != nil {
			return err
		}
	}
	if err := writeSettingMap(ctx, ss, deadLetterRetentionKey, stored); err != nil {
		return wrapOp("store the dead letter retentions", err)
	}
	return nil
}

// DeadLetterRetentionSet gives one queue its own dead letter retention, or, when r is the zero
// value, returns it to the client's bounds, leaving the other queues' as they are, whatever other
// processes change at the same moment. It checks r as DeadLetterRetentionsSet does.
func (c *Client) DeadLetterRetentionSet(ctx context.Context, queue string, r DeadLetterRetention) error {
	return c.DeadLetterRetentionUpdate(ctx, queue, func(DeadLetterRetention) DeadLetterRetention { return r })
}

// DeadLetterRetentionUpdate changes queue's dead letter retention to what fn returns given the
// current one (zero when the queue has none; a zero result returns the queue to the client's
// bounds), checked as DeadLetterRetentionsSet does. fn sees the retention as stored when the change
// is written: when another process changes the retentions between the read and the write, fn runs
// again on the newer one, so a change of one bound keeps a concurrent change of another. fn must
// have no other effect.
func (c *Client) DeadLetterRetentionUpdate(ctx context.Context, queue string, fn func(DeadLetterRetention) DeadLetterRetention) error {
	ss, err := c.settingStore("dead letter retention per queue")
	if err != nil {
		return err
	}
	c.retentionMu.Lock() // this process's changes queue up rather than retry against each other
	defer c.retentionMu.Unlock()
	err = updateSettingMap(ctx, ss, deadLetterRetentionKey, func(m map[string]storedRetention) error {
		var cur DeadLetterRetention
		if s, ok := m[queue]; ok {
			var err error
			if cur, err = s.parse(queue); err != nil {
				return err
			}
		}
		r := fn(cur)
		if r == (DeadLetterRetention{}) {
			delete(m, queue)
			return nil
		}
		s, err := c.storedDeadLetterRetention(queue, r)
		if err != nil {
			return err
		}
		m[queue] = s
		return nil
	})
	if err != nil && !errors.Is(err, ErrInvalidArgs) {
		return wrapOp("store the dead letter retentions", err)
	}
	return err
}

// deadLetterQueues gives the maintenance leader the queues' own retentions at each cleanup pass.
func (c *Client) deadLetterQueues(ctx context.Context) (map[string]maintenance.QueueRetention, error) {
	if _, ok := c.store.(store.SettingStore); !ok {
		return nil, nil
	}
	rs, err := c.DeadLetterRetentions(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]maintenance.QueueRetention, len(rs))
	for q, r := range rs {
		archive := r.PruningPolicy == PruneArchive ||
			(r.PruningPolicy == "" && c.cfg.DeadLetterPruningPolicy == PruneArchive)
		out[q] = maintenance.QueueRetention{MaxAge: r.MaxAge, MaxCount: r.MaxCount, Archive: archive}
	}
	return out, nil
}
