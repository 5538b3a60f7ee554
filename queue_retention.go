package pronto

import (
	"context"
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
				return nil, fmt.Errorf("pronto: the stored retention of queue %s: %q: %w", q, f.text, err)
			}
			*f.to = d
		}
		out[q] = qr
	}
	return out, nil
}

// QueueRetentionSet gives queue its own retention of completed and cancelled jobs, or, with both
// zero, returns it to the client's. Neither may be negative, and the queue name must be valid;
// anything else is an error matching ErrInvalidArgs, and nothing is stored. The retentions of all
// queues are one setting: two processes changing different queues at the same moment can lose one
// change (the later write wins), as with DeadLetterRetentionsSet.
func (c *Client) QueueRetentionSet(ctx context.Context, queue string, r QueueRetention) error {
	ss, err := c.settingStore("retention per queue")
	if err != nil {
		return err
	}
	if !ValidQueueName(queue) {
		return invalidf("queue retention: queue %q: not a valid queue name", queue)
	}
	if r.Completed < 0 || r.Cancelled < 0 {
		return invalidf("queue retention of %s: Completed and Cancelled cannot be negative", queue)
	}
	c.retentionMu.Lock() // this process's changes never lose one another
	defer c.retentionMu.Unlock()
	cur, err := c.QueueRetentions(ctx)
	if err != nil {
		return err
	}
	if r == (QueueRetention{}) {
		delete(cur, queue)
	} else {
		cur[queue] = r
	}
	stored := make(map[string]storedQueueRetention, len(cur))
	for q, qr := range cur {
		var s storedQueueRetention
		if qr.Completed > 0 {
			s.Completed = isodur.Format(qr.Completed)
		}
		if qr.Cancelled > 0 {
			s.Cancelled = isodur.Format(qr.Cancelled)
		}
		stored[q] = s
	}
	if err := writeSettingMap(ctx, ss, queueRetentionKey, stored); err != nil {
		return wrapOp("store the queues' retentions", err)
	}
	return nil
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
