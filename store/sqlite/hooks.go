package sqlite

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"

	"github.com/pronto-jobs/pronto/internal/notifyhub"
	"github.com/pronto-jobs/pronto/store"
)

// Deferred notifications for InsertSQLTx.
//
// database/sql has no commit hook, but SQLite has one. Every writer connection a Store opens gets an
// identity (a number written to its private temp schema's user_version) and a commit and rollback
// hook. InsertSQLTx reads the identity through the application's transaction, and queues its
// notifications on that connection; the commit hook publishes them as the transaction commits, the
// rollback hook drops them. See InsertSQLTx for the case of a transaction on some other connection.

// connState is what one writer connection has queued for its commit.
type connState struct {
	hub     *notifyhub.Hub
	mu      sync.Mutex
	pending []store.Notification
}

var (
	connSeq    atomic.Int64
	connsMu    sync.RWMutex
	connStates = map[int64]*connState{}
)

// lookupConn returns the state of the writer connection with identity id, or nil.
func lookupConn(id int64) *connState {
	connsMu.RLock()
	defer connsMu.RUnlock()
	return connStates[id]
}

// hookConnector opens writer connections with identities and commit hooks, on a file in WAL mode.
type hookConnector struct {
	base     driver.Connector
	hub      *notifyhub.Hub
	walWait  time.Duration // how long entering WAL mode waits for another writer: the busy timeout
	onCommit func()        // called in every commit hook; must not block

	mu  sync.Mutex
	ids []int64
}

func newHookConnector(dsn string, hub *notifyhub.Hub, walWait time.Duration, onCommit func()) (*hookConnector, error) {
	base, err := sqlite.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return &hookConnector{base: base, hub: hub, walWait: walWait, onCommit: onCommit}, nil
}

// Connect implements driver.Connector.
func (h *hookConnector) Connect(ctx context.Context) (driver.Conn, error) {
	c, err := h.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	hr, ok1 := c.(sqlite.HookRegisterer)
	ex, ok2 := c.(driver.ExecerContext)
	if !ok1 || !ok2 {
		_ = c.Close()
		return nil, errors.New("sqlite store: driver connection does not support commit hooks")
	}
	if err := enterWAL(ctx, ex, h.walWait); err != nil {
		_ = c.Close()
		return nil, err
	}
	id := connSeq.Add(1)
	// The temp schema is private to the connection: its user_version names the connection.
	if _, err := ex.ExecContext(ctx, fmt.Sprintf("PRAGMA temp.user_version = %d", id), nil); err != nil {
		_ = c.Close()
		return nil, err
	}
	cs := &connState{hub: h.hub}
	hr.RegisterCommitHook(func() int32 {
		cs.mu.Lock()
		p := cs.pending
		cs.pending = nil
		cs.mu.Unlock()
		for _, n := range p {
			cs.hub.Publish(n)
		}
		h.onCommit()
		return 0 // let the commit proceed
	})
	hr.RegisterRollbackHook(func() {
		cs.mu.Lock()
		cs.pending = nil
		cs.mu.Unlock()
	})
	connsMu.Lock()
	connStates[id] = cs
	connsMu.Unlock()
	h.mu.Lock()
	h.ids = append(h.ids, id)
	h.mu.Unlock()
	return c, nil
}

// Driver implements driver.Connector.
func (h *hookConnector) Driver() driver.Driver { return h.base.Driver() }

// forget drops the identities of the connections h opened (their handles are closed).
func (h *hookConnector) forget() {
	h.mu.Lock()
	ids := h.ids
	h.ids = nil
	h.mu.Unlock()
	connsMu.Lock()
	for _, id := range ids {
		delete(connStates, id)
	}
	connsMu.Unlock()
}

// containsNoSuchTable reports whether err is SQLite's "no such table".
func containsNoSuchTable(err error) bool {
	return strings.Contains(err.Error(), "no such table")
}

// sqliteCode returns the extended SQLite result code carried by err, or 0.
func sqliteCode(err error) int {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code()
	}
	return 0
}
