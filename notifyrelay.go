package pronto

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// Notifier carries notifications between processes for a store whose own notifications do not
// reach them: several processes sharing one SQLite file, or PostgreSQL behind a pooler that cannot
// LISTEN, find each other's jobs only by their poll (Config.PollInterval) unless they share a
// Notifier. redis.NewNotifier (package
// github.com/pronto-jobs/pronto/store/redis) is one, on Redis pub/sub. Set it as Config.Notifier
// in every process, on the same channel.
type Notifier interface {
	// Subscribe and Signal are as for store.Notifier: Subscribe receives what other processes
	// publish and signal (not this notifier's own Publish), Signal reaches every process on the
	// channel, this one included.
	store.Notifier
	// Publish sends ns to the other processes on the channel (not to this notifier's own
	// subscribers, which have them from the store already).
	Publish(ctx context.Context, ns []store.Notification) error
}

// relayTimeout bounds one Publish of relayed notifications.
const relayTimeout = 5 * time.Second

// relay forwards the store's own notifications (inserts, cancellations, pauses and resumes) to a
// Config.Notifier, in the order the store delivered them, batched while a send is in flight. It
// never blocks the store: Publish runs on a goroutine that exists only while notifications wait.
type relay struct {
	n       Notifier
	mu      sync.Mutex
	pending []store.Notification
	running bool
	onErr   func(error)
}

// forward is subscribed to the store's notifier.
func (r *relay) forward(n store.Notification) {
	switch n.Kind {
	case store.NotifyInsert, store.NotifyCancel, store.NotifyPause, store.NotifyResume:
	default:
		return // client signals go through the Notifier itself; a reconnect is the store's own affair
	}
	if n.Kind == store.NotifyInsert && n.Nonce == 0 && n.DueAt.IsZero() {
		// The store announced it to its own process only, to every client at once. Across processes
		// the clients agree on one claimer by the nonce (see store.Notification.Nonce).
		n.Nonce = rand.Uint32() | 1
	}
	r.mu.Lock()
	r.pending = append(r.pending, n)
	start := !r.running
	r.running = true
	r.mu.Unlock()
	if start {
		go r.send()
	}
}

func (r *relay) send() {
	for {
		r.mu.Lock()
		ns := r.pending
		r.pending = nil
		if len(ns) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), relayTimeout)
		err := r.n.Publish(ctx, ns)
		cancel()
		if err != nil && r.onErr != nil {
			// Lost notifications cost pickup latency (the poll finds the jobs), never a job.
			r.onErr(err)
		}
	}
}

// startRelay forwards the store's notifications to Config.Notifier. A store that delivers its own
// notifications in its process (memory, SQLite, Redis) has them relayed as it delivers them. A store
// that hears even its own through a listener connection (store.ListenerStatus: PostgreSQL's LISTEN)
// may have none to relay (a pooler that cannot LISTEN): for it the client announces the jobs it
// inserts instead, after each insert returns (an innermost insert middleware), to the other processes
// and, while the store hears nothing itself, to this one; jobs inserted in the application's
// transaction (InsertTx) once that commits (AfterInsertCommit). The store's other releases
// (workflow children, retries by an operator, rescues) are found by the poll.
func (c *Client) startRelay() {
	r := &relay{n: c.cfg.Notifier, onErr: func(err error) {
		c.cfg.Logger.Warn("pronto: relaying notifications to Config.Notifier failed", "client", c.cfg.ID, "err", err)
	}}
	ls, listens := c.store.(store.ListenerStatus)
	if !listens {
		c.store.Notifier().Subscribe(r.forward)
		return
	}
	announce := func(ctx context.Context, ps []*JobInsertParams, next InsertFunc) ([]*JobRow, error) {
		rows, err := next(ctx, ps)
		if err != nil {
			return rows, err
		}
		ns := insertAnnouncements(rows)
		if len(ns) == 0 {
			return rows, err
		}
		// In the application's transaction, announced now, the jobs would not be there for the
		// claim it wakes: they are announced once it commits, never if it rolls back, from the one
		// commit watch that runs the rest of the insert's deferred work (the innermost middleware
		// defers first, so the wake-up goes out first). Outside one it runs at once.
		AfterInsertCommit(ctx, func() { c.announce(r, ls, ns) })
		return rows, err
	}
	c.cfg.InsertMiddleware = append(slices.Clone(c.cfg.InsertMiddleware), announce)
}

// announce sends the insert announcements ns to the other processes and, when the store's listener
// does not hear them (not connected: a pooler that cannot LISTEN), to this process's own producers,
// with the same nonce, so that every process agrees on the one that claims.
func (c *Client) announce(r *relay, ls store.ListenerStatus, ns []store.Notification) {
	local := !ls.ListenerConnected()
	for _, n := range ns {
		if n.DueAt.IsZero() && n.Nonce == 0 {
			n.Nonce = rand.Uint32() | 1
		}
		r.forward(n)
		if local {
			c.onNotification(n)
		}
	}
}

// insertAnnouncements returns what a store announces for inserted rows: per queue, an insert due
// now when one of its jobs is available, else one with the earliest due time of its scheduled jobs.
func insertAnnouncements(rows []*JobRow) []store.Notification {
	var out []store.Notification
	at := map[string]int{}
	for _, j := range rows {
		if j.Duplicate {
			continue // the holder of the unique key met: its own insert announced it
		}
		var due time.Time
		switch j.State {
		case store.StateAvailable:
		case store.StateScheduled:
			due = j.ScheduledAt
		default:
			continue // pending (workflow) jobs and refused ones announce nothing
		}
		k, seen := at[j.Queue]
		if !seen {
			at[j.Queue] = len(out)
			out = append(out, store.Notification{Kind: store.NotifyInsert, Queue: j.Queue, DueAt: due})
			continue
		}
		if n := &out[k]; !n.DueAt.IsZero() && (due.IsZero() || due.Before(n.DueAt)) {
			n.DueAt = due
		}
	}
	return out
}

// notifier returns where the client sends its signals: Config.Notifier when set, else the store's.
func (c *Client) notifier() store.Notifier {
	if c.cfg.Notifier != nil {
		return c.cfg.Notifier
	}
	return c.store.Notifier()
}
