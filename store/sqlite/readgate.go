package sqlite

import (
	"cmp"
	"context"
	"database/sql/driver"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// readGate counts the reads running on this process's reader connections of one file and lets a
// checkpoint hold new ones back while it waits for those running to end. A read runs from its query
// until its rows are closed, or from the beginning of its transaction until the transaction ends:
// the span in which SQLite keeps a read mark on the log.
//
// With a gate file (x, walgate.go) it does the same for the checkpoints of other processes: while
// reads run, the process holds the gate's read lock, taken once for a run of reads, and looks every
// walGateProbe for a checkpointer waiting; then it holds new reads back (yield) until the running
// ones end, and lets the lock go. A read then waits, at most walGateReadWait in all, for that
// checkpoint; if the checkpoint outlasts that (its process stopped), the reads after skip the gate
// until its intent lock is let go, rather than each wait for it again.
type readGate struct {
	mu      sync.Mutex
	running map[*gatedConn]time.Time // the connections reading, with the start of each read
	held    chan struct{}            // non-nil while a checkpoint holds reads back; closed on resume
	drained chan struct{}            // non-nil while a checkpoint waits for running to empty

	x         *walGate      // nil: no gate file, reads are held back for this process's checkpoints only
	xRead     bool          // this process holds the gate's read lock
	xLong     bool          // this process holds the gate's long-read lock
	xSkip     bool          // a checkpointer outlasted a read's wait: reads skip the gate until it lets go
	acquiring chan struct{} // non-nil while one read takes the read lock for all; closed after
	yield     chan struct{} // non-nil while another process's checkpoint holds reads back; closed after
	idleSince time.Time     // when running last emptied
	probe     *time.Timer   // runs look while xRead; made at the first read lock
}

func newReadGate() *readGate {
	return &readGate{running: make(map[*gatedConn]time.Time)}
}

// setWalGate makes the gate cooperate with other processes through x (nil: it does not).
func (g *readGate) setWalGate(x *walGate) {
	g.mu.Lock()
	g.x = x
	g.mu.Unlock()
}

// walGate returns the gate file, or nil.
func (g *readGate) walGate() *walGate {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.x
}

// closeWalGate stops the cooperation with other processes and closes the gate file, releasing its
// locks. Reads afterwards are held back for this process's checkpoints only.
func (g *readGate) closeWalGate() {
	g.mu.Lock()
	x := g.x
	g.x, g.xRead, g.xLong, g.xSkip = nil, false, false, false
	if g.probe != nil {
		g.probe.Stop()
		g.probe = nil
	}
	if g.yield != nil {
		close(g.yield)
		g.yield = nil
	}
	g.mu.Unlock()
	if x != nil {
		x.close()
	}
}

// enter records a read starting on c, first waiting, within ctx, for a checkpoint holding reads back:
// for one of this process, until it resumes; for one of another process, at most walGateReadWait
// in all, counted from the read's first wait for it (yield, acquiring and enterRead together).
func (g *readGate) enter(ctx context.Context, c *gatedConn) error {
	var deadline time.Time // set at the read's first wait for another process's checkpoint
	var timer *time.Timer
	expired := false // the wait for another process's checkpoint ran out: read without the gate
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	g.mu.Lock()
	for {
		if held := g.held; held != nil {
			g.mu.Unlock()
			select {
			case <-held:
			case <-ctx.Done():
				return ctx.Err()
			}
			g.mu.Lock()
			continue
		}
		if g.x == nil || g.xSkip || expired {
			break
		}
		if deadline.IsZero() && (g.yield != nil || g.acquiring != nil || !g.xRead) {
			deadline = time.Now().Add(walGateReadWait)
		}
		if wait := cmp.Or(g.yield, g.acquiring); wait != nil {
			if timer == nil {
				timer = time.NewTimer(time.Until(deadline))
			}
			g.mu.Unlock()
			select {
			case <-wait:
			case <-timer.C:
				// Another process's checkpoint outlasted the wait: this read goes on without it
				// (once a checkpoint of this process, if one began meanwhile, resumes).
				expired = true
			case <-ctx.Done():
				return ctx.Err()
			}
			g.mu.Lock()
			continue
		}
		if g.xRead {
			break
		}
		// The first read of a run takes the gate's read lock, for all of the run's reads.
		x, acquiring := g.x, make(chan struct{})
		g.acquiring = acquiring
		g.mu.Unlock()
		err := x.enterRead(ctx, time.Until(deadline))
		g.mu.Lock()
		g.acquiring = nil
		close(acquiring)
		// Every outcome goes round again: a checkpoint of this process that began meanwhile is
		// waited for (held) before the read runs, with or without the lock.
		switch {
		case err == nil && g.x == x && g.held != nil:
			// That checkpoint waits for the lock: let it go.
			_ = x.leaveRead()
		case err == nil && g.x == x:
			g.xRead = true
			g.idleSince = time.Now()
			g.startProbe()
		case err == nil: // the gate was closed meanwhile
			_ = x.leaveRead()
		case ctx.Err() != nil:
			g.mu.Unlock()
			return ctx.Err()
		case errors.Is(err, errGateWait) && g.x == x:
			// Another process's checkpoint outlasted the wait: this read goes on without the lock,
			// and the reads after it skip the gate until that checkpointer lets go (look), rather
			// than each wait for it again.
			g.xSkip = true
			g.startProbe()
		case !errors.Is(err, errGateWait) && g.x == x:
			// The lock file failed: cooperate no more, rather than fail reads that need no lock.
			slog.Warn("sqlite store: the gate file's locks failed; reads of other processes are no longer held back for checkpoints",
				slog.String("error", err.Error()))
			g.x = nil
			go x.close()
		default: // the lock failed, the gate closed meanwhile: read without it
			expired = true
		}
	}
	g.running[c] = time.Now()
	g.mu.Unlock()
	return nil
}

// startProbe runs look in walGateProbe. g.mu is held.
func (g *readGate) startProbe() {
	if g.probe == nil {
		g.probe = time.AfterFunc(walGateProbe, g.look)
	} else {
		g.probe.Reset(walGateProbe)
	}
}

// leave records the end of c's read.
func (g *readGate) leave(c *gatedConn) {
	g.mu.Lock()
	delete(g.running, c)
	if len(g.running) == 0 {
		if g.drained != nil {
			close(g.drained)
			g.drained = nil
		}
		g.idleSince = time.Now()
		if g.yield != nil {
			g.leaveWalGate()
		}
	}
	g.mu.Unlock()
}

// leaveWalGate releases the gate's locks, no read running, and lets the reads held back for another
// process's checkpoint go on to wait for it. g.mu is held.
func (g *readGate) leaveWalGate() {
	if g.xRead {
		if err := g.x.leaveRead(); err != nil {
			slog.Warn("sqlite store: releasing the gate file's locks failed", slog.String("error", err.Error()))
		}
		g.xRead, g.xLong = false, false
		g.probe.Stop()
	}
	if g.yield != nil {
		close(g.yield)
		g.yield = nil
	}
}

// look runs every walGateProbe while this process holds the gate's read lock. It says whether a
// read has run for walReadPauseWait (gateLong), holds new reads back for a checkpointer waiting
// unless such a read runs, and lets the lock go when reads have stopped for walGateIdle. While
// reads skip the gate (xSkip), it looks for the intent lock's release instead.
func (g *readGate) look() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.x != nil && g.xSkip {
		// Reads skip the gate while the checkpointer they waited out holds the intent lock.
		if waiting, err := g.x.checkpointWaiting(); err == nil && waiting {
			g.probe.Reset(walGateProbe)
		} else {
			g.xSkip = false
		}
		return
	}
	if g.x == nil || !g.xRead {
		return
	}
	now := time.Now()
	long := false
	for _, since := range g.running {
		if now.Sub(since) >= walReadPauseWait {
			long = true
			break
		}
	}
	var err error
	switch {
	case long && !g.xLong:
		var ok bool
		ok, err = g.x.rd.tryLock(gateLong, false)
		g.xLong = ok
	case !long && g.xLong:
		err = g.x.rd.unlock(gateLong)
		g.xLong = false
	}
	if long && g.yield != nil { // the checkpointer's wait is lost: let reads go on
		close(g.yield)
		g.yield = nil
	}
	if err == nil && !long && g.yield == nil {
		var waiting bool
		waiting, err = g.x.checkpointWaiting()
		switch {
		case err != nil:
		case waiting && len(g.running) == 0:
			g.leaveWalGate()
		case waiting:
			g.yield = make(chan struct{}) // leave lets the lock go once running empties
		case len(g.running) == 0 && now.Sub(g.idleSince) >= walGateIdle:
			g.leaveWalGate()
		}
	}
	if err != nil {
		slog.Warn("sqlite store: the gate file's locks failed", slog.String("error", err.Error()))
	}
	if g.xRead {
		g.probe.Reset(walGateProbe)
	}
}

// errLongRead is pause's error when a read has run for longer than pause would wait.
var errLongRead = errors.New("a read has run longer than the wait")

// pause holds new reads back until resume is called, once the reads running now have ended. It
// holds them back at most wait: if the running reads outlast it, it lets reads go on and fails. It
// fails at once, holding nothing back, if a read has already run for wait: a long read (an export,
// an open read transaction) keeps the log from restarting until it ends anyway. Once the reads
// have ended, it lets the gate file's read lock go, for the checkpointer to take.
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
		g.leaveWalGate()
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
		g.mu.Lock()
		if len(g.running) == 0 {
			g.leaveWalGate()
		}
		g.mu.Unlock()
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
