// Package notifyhub is an in-process fan-out of store notifications, used by the stores whose
// notifications never leave the process (memory, and SQLite within one process) and as the delivery
// end of the PostgreSQL listener.
package notifyhub

import (
	"context"
	"fmt"
	"sync"

	"github.com/pronto-jobs/pronto/store"
)

// Hub delivers each published notification to every current subscriber. It implements
// store.Notifier. The zero value is ready to use.
type Hub struct {
	mu     sync.RWMutex
	nextID int
	subs   map[int]func(store.Notification)
}

// Subscribe registers fn until the returned function is called. fn must not block.
func (h *Hub) Subscribe(fn func(store.Notification)) func() {
	h.mu.Lock()
	if h.subs == nil {
		h.subs = make(map[int]func(store.Notification))
	}
	id := h.nextID
	h.nextID++
	h.subs[id] = fn
	h.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			delete(h.subs, id)
			h.mu.Unlock()
		})
	}
}

// Publish delivers n to every subscriber, synchronously, in the caller's goroutine.
func (h *Hub) Publish(n store.Notification) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, fn := range h.subs {
		fn(n)
	}
}

// Signal publishes the client signals ns to every subscriber. It implements store.Notifier.
func (h *Hub) Signal(ctx context.Context, ns []store.Notification) error {
	if err := CheckSignals(ns); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, n := range ns {
		h.Publish(n)
	}
	return nil
}

// CheckSignals returns an error naming the first notification of ns that is not a client signal.
func CheckSignals(ns []store.Notification) error {
	for _, n := range ns {
		switch n.Kind {
		case store.NotifyPresence, store.NotifyGone, store.NotifyOverflow:
			if n.Client == "" {
				return fmt.Errorf("signal %s: the sending client is not named", n.Kind)
			}
		default:
			return fmt.Errorf("signal: %q is not a client signal (presence, gone, overflow)", n.Kind)
		}
	}
	return nil
}

// Len returns the number of subscribers.
func (h *Hub) Len() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.subs)
}
