package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto/store"
)

// subscription is the sharded pub/sub subscription to the notification channel, renewed whole when
// go-redis's own reconnection cannot help:
//   - Redis ends it without closing the connection (a "sunsubscribe" it sent by itself) when the
//     channel's slot moves to another master of a cluster;
//   - the connection went silent (a partition, a NAT or load balancer that dropped it): nothing
//     arrives, not even the answer to a ping, and TCP would take many minutes to notice.
type subscription struct {
	rdb     goredis.UniversalClient
	channel string

	mu     sync.Mutex
	ps     *goredis.PubSub
	closed bool
}

// Health checks of a silent subscription: after subscriptionIdle without a message it is pinged,
// and renewed when the pong does not come within subscriptionIdle more. A variable for tests.
var subscriptionIdle = 5 * time.Second

// subscribe opens the subscription and waits for Redis to confirm it, so that nothing published
// after it returns is missed.
func subscribe(ctx context.Context, rdb goredis.UniversalClient, channel string) (*subscription, error) {
	s := &subscription{rdb: rdb, channel: channel}
	ps, err := s.open(ctx)
	if err != nil {
		return nil, err
	}
	s.ps = ps
	return s, nil
}

func (s *subscription) open(ctx context.Context) (*goredis.PubSub, error) {
	ps := s.rdb.SSubscribe(ctx, s.channel)
	// Bounded: a connection that is accepted and then never answers would hold a renewal for good.
	if _, err := ps.ReceiveTimeout(ctx, max(2*subscriptionIdle, 10*time.Second)); err != nil {
		_ = ps.Close()
		// A subscription's connection is its own, outside the client's hooks.
		return nil, fmt.Errorf("subscribe to %s: %w", s.channel, unreachable(ctx, err))
	}
	return ps, nil
}

// current returns the subscription's PubSub, or nil once it is closed.
func (s *subscription) current() *goredis.PubSub {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	return s.ps
}

// renew replaces the subscription with a new one (on a cluster, on the channel's current master).
// It reports false when the subscription is closed meanwhile.
func (s *subscription) renew(ctx context.Context) (bool, error) {
	if c, ok := s.rdb.(*goredis.ClusterClient); ok {
		c.ReloadState(ctx) // the slot may have moved
	}
	ps, err := s.open(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		if ps != nil {
			_ = ps.Close()
		}
		return false, nil
	}
	if err != nil {
		return true, err
	}
	_ = s.ps.Close()
	s.ps = ps
	return true, nil
}

// Close ends the subscription; a receive loop on it returns.
func (s *subscription) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.ps.Close()
}

// receiveNotifications delivers the subscription's messages until ctx ends or the subscription is
// closed, leaving out the ones sender published itself. A resubscription (go-redis's after a lost
// connection, or a renewal) is delivered as NotifyReconnect, since anything published meanwhile was
// missed. Both the store and the stand-alone Notifier use it; up, when given, tracks whether the
// subscription is up.
func receiveNotifications(ctx context.Context, sub *subscription, sender string, deliver func(store.Notification), up *atomic.Bool) {
	// Every message sender publishes ends so (Sender is the payload's last field, and the insert
	// scripts write it last too; tokens are hex): its echo is skipped without decoding the JSON, a
	// cost a producer would otherwise pay once per insert.
	own := `"s":"` + sender + `"}`
	setUp := func(v bool) {
		if up != nil {
			up.Store(v)
		}
	}
	pinged := false
	renew := func() bool {
		setUp(false)
		for {
			open, err := sub.renew(ctx)
			if !open || ctx.Err() != nil {
				return false
			}
			if err == nil {
				pinged = false
				setUp(true)
				deliver(store.Notification{Kind: store.NotifyReconnect})
				return true
			}
			select {
			case <-ctx.Done():
				return false
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	for {
		ps := sub.current()
		if ps == nil {
			return
		}
		msg, err := ps.ReceiveTimeout(ctx, subscriptionIdle)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, goredis.ErrClosed) {
				setUp(false)
				return
			}
			if isTimeout(err) {
				if !pinged {
					pinged = true // silent for a while: is anybody there?
					_ = ps.Ping(ctx)
					continue
				}
				if !renew() { // not even the pong came back
					return
				}
				continue
			}
			setUp(false)
			if c, ok := sub.rdb.(*goredis.ClusterClient); ok {
				c.ReloadState(ctx) // the channel's master may have died: go to its successor
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		pinged = false
		switch m := msg.(type) {
		case *goredis.Message:
			if strings.HasSuffix(m.Payload, own) {
				continue
			}
			if n, from, ok := decodeNotification(m.Payload); ok && from != sender {
				deliver(n)
			}
		case *goredis.Subscription:
			switch m.Kind {
			case "ssubscribe", "subscribe":
				setUp(true)
				deliver(store.Notification{Kind: store.NotifyReconnect})
			case "sunsubscribe":
				// Redis ended the subscription itself: the channel's slot moved to another master.
				if !renew() {
					return
				}
			}
		}
	}
}

// isTimeout reports whether err is a read that timed out.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
