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

// QueueRetention keeps one queue's completed and cancelled jobs for other times than
// Config.CompletedRetention and CancelledRetention (ojs-admin-api.md 6.6, a queue's retention): a
// payments queue can keep its completed jobs a month while the others keep them a day. Zero follows
// the client's setting. A queue's discarded jobs have their own bounds (DeadLetterRetention).
type QueueRetention struct {
	Completed time.Duration
	Cancelled time.Duration
}

// queueRetentionKey is the setting that holds the queues' retentions, a JSON object by queue.
const queueRetentionKey = "queue.retention"

// storedQueueRetention is one queue's retention as the setting holds it (ISO 8601 durations).
type storedQueueRetention struct {
	Completed string `json:"completed,omitempty"`
	Cancelled string `json:"cancelled,omitempty"`
}

// QueueRetentions returns the queues whose completed or cancelled jobs have a retention of their
// own. They are kept in the store, so that whichever client leads the cluster's cleanup applies
// them (every 30 s). It returns an error matching ErrUnsupported when the store keeps no settings.
func (c *Client) QueueRetentions(ctx context.Context) (map[string]QueueRetention, error) {
	ss, err := c.settingStore("retention per queue")
	if err != nil {
		return nil, err
	}
	stored, err := readSettingMap[storedQueueRetention](ctx, ss, queueRetentionKey)
	if err != nil {
		return nil, wrapOp("read the queues' retentions", err)
	}
	out := make(map[string]QueueRetention, len(stored))
	for q, r := range stored {
		if out[q], err = r.parse(q); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// parse reads the stored retention of queue q.
func (r storedQueueRetention) parse(q string) (QueueRetention, error) {
	var qr QueueRetention
	for _, f := range []struct {
		text string
		to   *time.Duration
	}{{r.Completed, &qr.Completed}, {r.Cancelled, &qr.Cancelled}} {
		if f.text == "" {
			continue
		}
		d, err := isodur.Parse(f.text)
		if err != nil {
			return qr, fmt.Errorf("pronto: the stored retention of queue %s: %q: %w", q, f.text, err)
		}
		*f.to = d
	}
	return qr, nil
}

// QueueRetentionSet gives queue its own retention of completed and cancelled jobs, or, with both
// zero, returns it to the client's. Neither may be negative, and the queue name must be valid;
// anything else is an error matching ErrInvalidArgs, and nothing is stored. The other queues'
// retentions stay as they are, whatever other processes change at the same moment.
func (c *Client) QueueRetentionSet(ctx context.Context, queue string, r QueueRetention) error {
	return c.QueueRetentionUpdate(ctx, queue, func(QueueRetention) QueueRetention { return r })
}

// QueueRetentionUpdate changes queue's retention to what fn returns given the current one (zero
// when the queue has none), checked and stored as QueueRetentionSet does. fn sees the retention as
// stored when the change is written: when another process changes the queues' retentions between
// the read and the write, fn runs again on the newer one, so a change of one field keeps a
// concurrent change of the other. fn must have no other effect.
func (c *Client) QueueRetentionUpdate(ctx context.Context, queue string, fn func(QueueRetention) QueueRetention) error {
	ss, err := c.settingStore("retention per queue")
	if err != nil {
		return err
	}
	if !ValidQueueName(queue) {
		return invalidf("queue retention: queue %q: not a valid queue name", queue)
	}
	c.retentionMu.Lock() // this process's changes queue up rather than retry against each other
	defer c.retentionMu.Unlock()
	err = updateSettingMap(ctx, ss, queueRetentionKey, func(m map[string]storedQueueRetention) error {
		var cur QueueRetention
		if s, ok := m[queue]; ok {
			var err error
			if cur, err = s.parse(queue); err != nil {
				return err
			}
		}
		r := fn(cur)
		if r.Completed < 0 || r.Cancelled < 0 {
			return invalidf("queue retention of %s: Completed and Cancelled cannot be negative", queue)
		}
		if r == (QueueRetention{}) {
			delete(m, queue)
			return nil
		}
		var s storedQueueRetention
		if r.Completed > 0 {
			s.Completed = isodur.Format(r.Completed)
		}
		if r.Cancelled > 0 {
			s.Cancelled = isodur.Format(r.Cancelled)
		}
		m[queue] = s
		return nil
	})
	if err != nil && !errors.Is(err, ErrInvalidArgs) {
		return wrapOp("store the queues' retentions", err)
	}
	return err
}

// finishedQueues gives the maintenance leader the queues' own retentions at each cleanup pass.
func (c *Client) finishedQueues(ctx context.Context) (map[string]maintenance.FinishedRetention, error) {
	if _, ok := c.store.(store.SettingStore); !ok {
		return nil, nil
	}
	rs, err := c.QueueRetentions(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]maintenance.FinishedRetention, len(rs))
	for q, r := range rs {
		out[q] = maintenance.FinishedRetention{Completed: r.Completed, Cancelled: r.Cancelled}
	}
	return out, nil
}
