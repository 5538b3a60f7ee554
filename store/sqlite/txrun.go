package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// txRunner runs statements inside one write transaction. When the transaction is on this store's
// writer, statements prepared beforehand (see prepare) are used through it; otherwise, and for
// statements not prepared yet, the SQL text is run as it is. Nothing is prepared on the writer while
// the transaction is open: the transaction holds the writer's only connection.
type txRunner struct {
	tx *sql.Tx
	s  *Store // nil when tx is on a connection this store does not own
}

// prepared returns the writer's prepared statement for query, or nil.
func (r txRunner) prepared(query string) *sql.Stmt {
	if r.s == nil {
		return nil
	}
	r.s.stmtMu.Lock()
	defer r.s.stmtMu.Unlock()
	return r.s.stmts[query]
}

func (r txRunner) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := r.prepared(query); st != nil {
		return r.tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return r.tx.QueryContext(ctx, query, args...)
}

// QueryRowContext is QueryContext for one row.
func (r txRunner) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := r.prepared(query); st != nil {
		return r.tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return r.tx.QueryRowContext(ctx, query, args...)
}

func (r txRunner) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := r.prepared(query); st != nil {
		return r.tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return r.tx.ExecContext(ctx, query, args...)
}

// prepare makes sure the writer has prepared every query, so that a transaction opened next can use
// them (through txRunner) without preparing.
func (s *Store) prepare(ctx context.Context, queries ...string) error {
	for _, q := range queries {
		if _, err := s.stmt(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// begin opens a write transaction on the writer with the statements it may run prepared.
func (s *Store) begin(ctx context.Context, queries ...string) (txRunner, error) {
	if err := s.prepare(ctx, queries...); err != nil {
		return txRunner{}, err
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return txRunner{}, err
	}
	return txRunner{tx: tx, s: s}, nil
}

// outbox gathers the notifications of one write, to publish once it commits: one NotifyInsert per
// queue (DueAt zero when any of the queue's jobs is due now, else the earliest due time), and any
// other notifications in order.
type outbox struct {
	wakes []store.Notification
	idx   map[string]int
	other []store.Notification
}

// wake announces queue, with jobs due at due (zero: now).
func (o *outbox) wake(queue string, due time.Time) {
	if o.idx == nil {
		o.idx = make(map[string]int)
	}
	i, ok := o.idx[queue]
	if !ok {
		o.idx[queue] = len(o.wakes)
		o.wakes = append(o.wakes, store.Notification{Kind: store.NotifyInsert, Queue: queue, DueAt: due})
		return
	}
	n := &o.wakes[i]
	if !n.DueAt.IsZero() && (due.IsZero() || due.Before(n.DueAt)) {
		n.DueAt = due
	}
}

// cancel tells the runner of job id in queue, under claim token, to stop.
func (o *outbox) cancel(queue, id, token string) {
	o.other = append(o.other, store.Notification{Kind: store.NotifyCancel, Queue: queue, JobID: id, ClaimToken: token})
}

// notifications returns everything gathered: the cancellations first, then the wake-ups.
func (o *outbox) notifications() []store.Notification {
	if len(o.other) == 0 {
		return o.wakes
	}
	return append(append([]store.Notification(nil), o.other...), o.wakes...)
}

// publish sends everything gathered in o to this process's subscribers.
func (s *Store) publishOutbox(o *outbox) {
	s.publish(o.notifications())
}
