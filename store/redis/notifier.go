package redis

import (
	"context"
	"fmt"
	neturl "net/url"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto/internal/notifyhub"
	"github.com/pronto-jobs/pronto/store"
)

// DefaultNotifierChannel is the channel of a Notifier whose options name none.
const DefaultNotifierChannel = "pronto:{relay}"

// NotifierOptions configures a Notifier.
type NotifierOptions struct {
	// Channel is the sharded pub/sub channel (default DefaultNotifierChannel). Processes working
	// the same jobs use the same channel; give each database its own.
	Channel string
}

// Notifier carries pronto's notifications between processes over Redis pub/sub for a store whose
// own notifications stay in its process: several processes sharing one SQLite file get push pickup
// (an insert in one wakes a worker in another at once) instead of finding the jobs at their next
// poll. Set it as pronto.Config.Notifier in every process (it implements pronto.Notifier). The
// Redis store does not need one: its notifications travel the same way already.
//
// Delivery is as for the Redis store's own channel: fire-and-forget pub/sub (a notification lost
// to a broken connection costs pickup latency, the poll finds the jobs), a NotifyReconnect after
// go-redis subscribes again, and a notifier's own publications are not echoed to its subscribers.
type Notifier struct {
	rdb     goredis.UniversalClient
	own     bool
	channel string
	sender  string
	hub     notifyhub.Hub
	ps      *subscription
	cancel  context.CancelFunc
	done    chan struct{}
	closed  sync.Once
}

// NewNotifier subscribes to the channel on rdb and returns once the subscription is confirmed, so
// nothing published after it returns is missed. Close does not close rdb. It adds to rdb the hook
// New adds, naming Redis in the errors of calls that cannot reach it.
func NewNotifier(ctx context.Context, rdb goredis.UniversalClient, opts NotifierOptions) (*Notifier, error) {
	ch := opts.Channel
	if ch == "" {
		ch = DefaultNotifierChannel
	}
	n := &Notifier{rdb: rdb, channel: ch, sender: tokens(1)[0], done: make(chan struct{})}
	addUnreachableHook(rdb)
	ps, err := subscribe(ctx, rdb, ch)
	if err != nil {
		return nil, fmt.Errorf("redis: notifier: %w", err)
	}
	n.ps = ps
	rctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go n.receive(rctx)
	return n, nil
}

// OpenNotifier connects to the Redis at url (redis:// or rediss://, as Open reads it, a Redis
// Cluster included; a ?channel=NAME option names the channel) and returns a Notifier on it. Close closes the connection.
func OpenNotifier(ctx context.Context, url string) (*Notifier, error) {
	base, channel := url, ""
	if b, query, ok := strings.Cut(url, "?"); ok {
		q, err := neturl.ParseQuery(query)
		if err != nil {
			return nil, fmt.Errorf("redis: notifier URL: query: %w", err)
		}
		channel = q.Get("channel")
		q.Del("channel")
		base = b
		if rest := q.Encode(); rest != "" {
			base += "?" + rest
		}
	}
	rdb, err := dial(ctx, base)
	if err != nil {
		return nil, fmt.Errorf("redis: notifier URL: %w", err)
	}
	n, err := NewNotifier(ctx, rdb, NotifierOptions{Channel: channel})
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	n.own = true
	return n, nil
}

func (n *Notifier) receive(ctx context.Context) {
	defer close(n.done)
	receiveNotifications(ctx, n.ps, n.sender, n.hub.Publish, nil)
}

// Subscribe registers fn for every notification other processes publish or signal, and this
// process's signals, until the returned function is called. fn must not block.
func (n *Notifier) Subscribe(fn func(store.Notification)) func() { return n.hub.Subscribe(fn) }

// Signal publishes client signals to every process on the channel, this one included.
func (n *Notifier) Signal(ctx context.Context, ns []store.Notification) error {
	if err := notifyhub.CheckSignals(ns); err != nil {
		return err
	}
	for _, note := range ns {
		n.hub.Publish(note)
	}
	if err := n.send(ctx, ns); err != nil {
		return fmt.Errorf("redis: notifier: signal: %w", err)
	}
	return nil
}

// Publish sends ns to the other processes on the channel, pipelined, not to this notifier's own
// subscribers.
func (n *Notifier) Publish(ctx context.Context, ns []store.Notification) error {
	if err := n.send(ctx, ns); err != nil {
		return fmt.Errorf("redis: notifier: publish: %w", err)
	}
	return nil
}

func (n *Notifier) send(ctx context.Context, ns []store.Notification) error {
	switch len(ns) {
	case 0:
		return nil
	case 1:
		return n.rdb.SPublish(ctx, n.channel, encodeNotification(ns[0], n.sender)).Err()
	}
	_, err := n.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for _, note := range ns {
			p.SPublish(ctx, n.channel, encodeNotification(note, n.sender))
		}
		return nil
	})
	return err
}

// Close ends the subscription and, for a notifier made by OpenNotifier, closes the connection.
func (n *Notifier) Close() error {
	var err error
	n.closed.Do(func() {
		n.cancel()
		err = n.ps.Close()
		<-n.done
		if n.own {
			if cerr := n.rdb.Close(); err == nil {
				err = cerr
			}
		}
	})
	return err
}
