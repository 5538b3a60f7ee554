package sqlite

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync"
	"time"
)

// readGate counts the reads running on this process's reader connections of one file and lets a
// checkpoint hold new ones back while it waits for those running to end. A read runs from its query
// until its rows are closed, or from the beginning of its transaction until the transaction ends:
// the span in which SQLite keeps a read mark on the log.
type readGate struct {
	mu      sync.Mutex
	running map[*gatedConn]time.Time // the connections reading, with the start of each read
	held    chan struct{}            // non-nil while a checkpoint holds reads back; closed on resume
	drained chan struct{}            // non-nil while a checkpoint waits for running to empty
}

func newReadGate() *readGate {
	return &readGate{running: make(map[*gatedConn]time.Time)}
}

// enter records a read starting on c, first waiting, within ctx, for a checkpoint holding reads back.
func (g *readGate) enter(ctx context.Context, c *gatedConn) error {
	g.mu.Lock()
	for g.held != nil {
		held := g.held
		g.mu.Unlock()
		select {
		case <-held:
		case <-ctx.Done():
			return ctx.Err()
		}
		g.mu.Lock()
	}
	g.running[c] = time.Now()
	g.mu.Unlock()
	return nil
}

// leave records the end of c's read.
func (g *readGate) leave(c *gatedConn) {
	g.mu.Lock()
	delete(g.running, c)
	if len(g.running) == 0 && g.drained != nil {
		close(g.drained)
		g.drained = nil
	}
	g.mu.Unlock()
}

// errLongRead is pause's error when a read has run for longer than pause would wait.
var errLongRead = errors.New("a read has run longer than the wait")

// pause holds new reads back until resume is called, once the reads running now have ended. It
// holds them back at most wait: if the running reads outlast it, it lets reads go on and fails. It
// fails at once, holding nothing back, if a read has already run for wait: a long read (an export,
// an open read transaction) keeps the log from restarting until it ends anyway.
func (g *readGate) pause(ctx context.Context, wait time.Duration) (resume func(), err error) {
	g.mu.Lock()
	now := time.Now()
	for _, since := range g.running {
		if now.Sub(since) >= wait {
			g.mu.Unlock()
			return nil, errLongRead
		}
	}
	held := make(chan struct{})
	g.held = held
	resume = func() {
		g.mu.Lock()
		g.held = nil
		g.drained = nil
		g.mu.Unlock()
		close(held)
	}
	if len(g.running) == 0 {
		g.mu.Unlock()
		return resume, nil
	}
	drained := make(chan struct{})
	g.drained = drained
	g.mu.Unlock()

	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-drained:
		return resume, nil
	case <-t.C:
		err = errLongRead
	case <-ctx.Done():
		err = ctx.Err()
	}
	resume()
	return nil, err
}

// gatedConnector opens reader connections whose reads pass through gate.
type gatedConnector struct {
	base driver.Connector
	gate *readGate
}

// Connect implements driver.Connector.
func (c *gatedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return newGatedConn(conn, c.gate)
}

// Driver implements driver.Connector.
func (c *gatedConnector) Driver() driver.Driver { return c.base.Driver() }

// baseConn is what gatedConn needs of the driver's connection.
type baseConn interface {
	driver.Conn
	driver.ConnPrepareContext
	driver.ConnBeginTx
	driver.QueryerContext
	driver.ExecerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// gatedConn is a reader connection whose reads enter its gate. Like every driver connection, it is
// used by one goroutine at a time.
type gatedConn struct {
	base baseConn
	gate *readGate
	inTx bool // a transaction is open: its reads were entered once, at its beginning
}

func newGatedConn(conn driver.Conn, gate *readGate) (driver.Conn, error) {
	base, ok := conn.(baseConn)
	if !ok {
		_ = conn.Close()
		return nil, errors.New("sqlite store: driver connection lacks the context methods the readers need")
	}
	return &gatedConn{base: base, gate: gate}, nil
}

var (
	_ driver.Conn               = (*gatedConn)(nil)
	_ driver.ConnPrepareContext = (*gatedConn)(nil)
	_ driver.ConnBeginTx        = (*gatedConn)(nil)
	_ driver.QueryerContext     = (*gatedConn)(nil)
	_ driver.ExecerContext      = (*gatedConn)(nil)
	_ driver.Pinger             = (*gatedConn)(nil)
	_ driver.SessionResetter    = (*gatedConn)(nil)
	_ driver.Validator          = (*gatedConn)(nil)
	_ driver.StmtQueryContext   = (*gatedStmt)(nil)
	_ driver.StmtExecContext    = (*gatedStmt)(nil)
)

// enter enters the gate for a statement, unless a transaction, entered already, is open.
func (c *gatedConn) enter(ctx context.Context) (entered bool, err error) {
	if c.inTx {
		return false, nil
	}
	if err := c.gate.enter(ctx, c); err != nil {
		return false, err
	}
	return true, nil
}

// Prepare implements driver.Conn.
func (c *gatedConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

// PrepareContext implements driver.ConnPrepareContext. Preparing reads the schema, a read like any.
func (c *gatedConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	entered, err := c.enter(ctx)
	if err != nil {
		return nil, err
	}
	st, err := c.base.PrepareContext(ctx, query)
	if entered {
		c.gate.leave(c)
	}
	if err != nil {
		return nil, err
	}
	base, ok := st.(baseStmt)
	if !ok {
		_ = st.Close()
		return nil, errors.New("sqlite store: driver statement lacks the context methods the readers need")
	}
	return &gatedStmt{base: base, conn: c}, nil
}

// Close implements driver.Conn.
func (c *gatedConn) Close() error { return c.base.Close() }

// Begin implements driver.Conn.
func (c *gatedConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// BeginTx implements driver.ConnBeginTx. The transaction is one read, until it ends.
func (c *gatedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if err := c.gate.enter(ctx, c); err != nil {
		return nil, err
	}
	tx, err := c.base.BeginTx(ctx, opts)
	if err != nil {
		c.gate.leave(c)
		return nil, err
	}
	c.inTx = true
	return &gatedTx{base: tx, conn: c}, nil
}

// QueryContext implements driver.QueryerContext. The read lasts until the rows are closed.
func (c *gatedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	entered, err := c.enter(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := c.base.QueryContext(ctx, query, args)
	return c.rows(rows, err, entered)
}

// ExecContext implements driver.ExecerContext.
func (c *gatedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	entered, err := c.enter(ctx)
	if err != nil {
		return nil, err
	}
	res, err := c.base.ExecContext(ctx, query, args)
	if entered {
		c.gate.leave(c)
	}
	return res, err
}

// rows wraps the rows of a query that entered the gate, to leave it when they are closed.
func (c *gatedConn) rows(rows driver.Rows, err error, entered bool) (driver.Rows, error) {
	if !entered {
		return rows, err
	}
	if err != nil {
		c.gate.leave(c)
		return nil, err
	}
	return &gatedRows{Rows: rows, conn: c}, nil
}

// Ping implements driver.Pinger.
func (c *gatedConn) Ping(ctx context.Context) error { return c.base.Ping(ctx) }

// ResetSession implements driver.SessionResetter.
func (c *gatedConn) ResetSession(ctx context.Context) error { return c.base.ResetSession(ctx) }

// IsValid implements driver.Validator.
func (c *gatedConn) IsValid() bool { return c.base.IsValid() }

// gatedTx is a reader transaction, one read from its beginning to its end.
type gatedTx struct {
	base driver.Tx
	conn *gatedConn
}

// Commit implements driver.Tx.
func (t *gatedTx) Commit() error {
	defer t.end()
	return t.base.Commit()
}

// Rollback implements driver.Tx.
func (t *gatedTx) Rollback() error {
	defer t.end()
	return t.base.Rollback()
}

func (t *gatedTx) end() {
	if t.conn.inTx {
		t.conn.inTx = false
		t.conn.gate.leave(t.conn)
	}
}

// baseStmt is what gatedStmt needs of the driver's statement.
type baseStmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

// gatedStmt is a statement prepared on a reader connection.
type gatedStmt struct {
	base baseStmt
	conn *gatedConn
}

// Close implements driver.Stmt.
func (s *gatedStmt) Close() error { return s.base.Close() }

// NumInput implements driver.Stmt.
func (s *gatedStmt) NumInput() int { return s.base.NumInput() }

// Exec implements driver.Stmt.
func (s *gatedStmt) Exec(args []driver.Value) (driver.Result, error) {
	return s.ExecContext(context.Background(), namedValues(args))
}

// Query implements driver.Stmt.
func (s *gatedStmt) Query(args []driver.Value) (driver.Rows, error) {
	return s.QueryContext(context.Background(), namedValues(args))
}

// namedValues numbers positional arguments as database/sql does.
func namedValues(args []driver.Value) []driver.NamedValue {
	nv := make([]driver.NamedValue, len(args))
	for i, v := range args {
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return nv
}

// ExecContext implements driver.StmtExecContext.
func (s *gatedStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	entered, err := s.conn.enter(ctx)
	if err != nil {
		return nil, err
	}
	res, err := s.base.ExecContext(ctx, args)
	if entered {
		s.conn.gate.leave(s.conn)
	}
	return res, err
}

// QueryContext implements driver.StmtQueryContext. The read lasts until the rows are closed.
func (s *gatedStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	entered, err := s.conn.enter(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := s.base.QueryContext(ctx, args)
	return s.conn.rows(rows, err, entered)
}

// gatedRows are the rows of a read that entered the gate: closing them ends the read.
type gatedRows struct {
	driver.Rows
	conn   *gatedConn
	closed bool
}

// Close implements driver.Rows.
func (r *gatedRows) Close() error {
	err := r.Rows.Close()
	if !r.closed {
		r.closed = true
		r.conn.gate.leave(r.conn)
	}
	return err
}
