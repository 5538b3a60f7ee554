// Package sqlite is pronto's embedded backend: jobs live in one SQLite file, with no server to run.
// It uses modernc.org/sqlite, a pure-Go SQLite, so it needs no cgo.
//
// # Connections
//
// A Store holds one writer connection (a *sql.DB limited to one open connection, whose transactions
// begin IMMEDIATE so writers queue instead of failing on a lock upgrade) and a small pool of
// read-only connections beside it, all on the same file in WAL mode with a busy timeout. Every Store
// opened on the same file in one process shares those handles and one notification hub; each
// process has its own. DB returns the writer, for applications that want to insert jobs inside their
// own transactions (see InsertSQLTx).
//
// # Durability
//
// The file runs in WAL mode with synchronous=NORMAL. A transaction is in the write-ahead log, in the
// operating system's cache, before its COMMIT returns, so a job acknowledged by Insert (or a
// completion acknowledged by Finish) survives the process being killed at any instant, SIGKILL
// included; the tests prove it. What synchronous=NORMAL gives up is the last few transactions on a
// power loss or operating-system crash, which are not fsynced until the next checkpoint; the database
// stays consistent either way.
//
// # Notifications
//
// Notifications are in-process only. Every Store opened on the same file (same absolute path) in one
// process shares one hub, so several clients in a process wake each other within microseconds of a
// commit. Across processes nothing is signalled: another process sharing the file finds new work on
// its next poll (the pronto client polls about once a second by default), and learns of pauses and
// cancellations the same way. Notifications are published after the transaction that caused them
// commits, never from inside it.
//
// # Several processes
//
// Any number of processes may open the same file. SQLite allows one writer at a time; claims are
// single write transactions, so no job is ever claimed twice, and a writer that finds the file
// locked waits up to the busy timeout (10 s by default) before failing. Open waits the same way for
// a lock held by another writer while it puts a new or rollback-journal file in WAL mode; meanwhile
// other Opens of that file in the process wait for it within their own contexts, and Opens and
// Closes of other files do not wait.
//
// # The write-ahead log
//
// SQLite's automatic checkpoint copies the -wal file into the database every 1000 pages (4 MB) but
// cannot restart the log while reads keep starting on it, so under constant reads (a dashboard,
// HTTP GETs) the log would grow without bound. When the -wal file passes 8 MB, the store holds
// this process's new reads back while the running ones end (at most 1 s) and during the checkpoint,
// copies the log and truncates it, waiting at most 200 ms for other processes' readers; a checkpoint
// that runs out of time is tried again after later writes. A read running longer than 1 s (an
// export, an open read transaction) is waited for once only: until it ends, other reads go on and
// the log keeps growing, as SQLite cannot restart it under that read anyway. The writer's
// journal_size_limit is 8 MB too.
//
// # Deleting or replacing the file
//
// Delete or replace the database (restoring a backup) with every process that has it open stopped,
// and delete its -wal and -shm files with it. An Open after the file at the path was deleted or
// replaced opens the file now there; Stores opened before keep the old file, which is lost when the
// last of them closes, and the process logs an error (log/slog) at its next writes.
//
// # Schema
//
// Migrate creates the tables pronto_jobs, pronto_queues, pronto_leaders, pronto_cron,
// pronto_rate_limits, pronto_workflows and pronto_job_deps (and records its migrations in
// pronto_migrations). The prefix lets them share the file with the application's own tables, which
// is what makes InsertSQLTx useful. Times are INTEGER unix microseconds; JSON values are TEXT.
//
// # Unique jobs, rate limits and workflows
//
// A unique index over unique_key, partial on the job's state being one of its unique states, makes
// two holders of one key impossible; inserts with keys resolve conflicts in their write transaction.
// Claims of a queue with jobs carrying rate keys take a write transaction that enforces the keys'
// limits (the one writer, across processes, makes that race-free); a key's waiting jobs behind an
// exhausted limit are held out of the claim index so that later claims do not walk past them. Every
// transaction that moves a workflow job to a terminal state decides its pending children before it
// commits. Jobs without keys or workflows are written, claimed and finished by the same single
// statements as before these features.
//
// # Cost
//
// Every write is a short transaction on the one writer connection, and each costs a fixed amount
// (the WAL commit, SQLite's file locks) on top of a small cost per row, so the hot paths are batched:
// a claim of up to the limit is one UPDATE ... RETURNING statement, a Finish of up to 128 completions
// one UPDATE ... FROM statement, an Insert of up to 64 jobs one INSERT, a heartbeat of up to 128 jobs
// one UPDATE. Every statement is prepared once per Store.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/pronto-jobs/pronto/internal/notifyhub"
	"github.com/pronto-jobs/pronto/store"
)

// Option configures Open.
type Option func(*config)

type config struct {
	busyTimeout time.Duration
	readConns   int
	now         func() time.Time
}

// WithBusyTimeout sets how long a connection waits for another process's lock before failing with
// SQLITE_BUSY (default 10 s). It applies when the file is first opened in this process; later Stores
// on the same file share the first one's connections.
func WithBusyTimeout(d time.Duration) Option {
	return func(c *config) { c.busyTimeout = d }
}

// WithReadConns sets the number of read-only connections (default 4). Like WithBusyTimeout it applies
// when the file is first opened in this process.
func WithReadConns(n int) Option {
	return func(c *config) { c.readConns = n }
}

// WithClock replaces time.Now as the store's clock, for tests that need to move time. The store reads
// "now" from this clock only, never from SQLite.
func WithClock(now func() time.Time) Option {
	return func(c *config) { c.now = now }
}

// Store is pronto's SQLite backend. It implements store.Store, store.Migrator, store.SQLTxInserter,
// store.RateLimiter, store.Workflows and store.CronStore, and is safe for concurrent use.
type Store struct {
	path   string // absolute path of the database file
	shared *sharedFile
	w      *sql.DB // the writer: one connection
	r      *sql.DB // readers: query_only connections
	hub    *notifyhub.Hub
	now    func() time.Time

	stmtMu sync.Mutex
	stmts  map[string]*sql.Stmt // prepared on w, keyed by SQL text
	// rstmts are the readers' statements of the queries read often (readStmt), prepared on r, which
	// prepares each on a reader connection at its first use there. Preparing is most of a short
	// read's cost: GetProgressBatch, run after every batch of HTTP acks, spent 60% of its CPU there.
	rstmts map[string]*sql.Stmt

	closeOnce sync.Once
	closeErr  error
}

var (
	_ store.Store         = (*Store)(nil)
	_ store.Migrator      = (*Store)(nil)
	_ store.SchemaChecker = (*Store)(nil)
	_ store.SQLTxInserter = (*Store)(nil)
)

// Open opens (creating if missing) the SQLite database at path and returns a Store on it. It does not
// create or upgrade the schema: call Migrate. The directory must exist and be writable (SQLite
// creates the -wal and -shm files beside the database: an error says so); a file that is not an
// SQLite database is refused with an error naming it. Close releases the Store.
func Open(ctx context.Context, path string, opts ...Option) (*Store, error) {
	cfg := config{busyTimeout: 10 * time.Second, readConns: 4, now: time.Now}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.readConns < 1 {
		cfg.readConns = 1
	}
	if path == "" {
		return nil, errors.New("sqlite store: open: empty database path")
	}
	if path == ":memory:" || (len(path) > 5 && path[:5] == "file:") {
		return nil, fmt.Errorf("sqlite store: open %q: give a plain file path (in-memory databases cannot be shared between connections; use store/memory)", path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: open %q: %w", path, err)
	}
	abs = filepath.Clean(abs)
	dir := filepath.Dir(abs)
	if fi, err := os.Stat(dir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("sqlite store: open %q: directory %q does not exist", path, dir)
		}
		return nil, fmt.Errorf("sqlite store: open %q: %w", path, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("sqlite store: open %q: %q is not a directory", path, dir)
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		abs = filepath.Join(real, filepath.Base(abs))
	}
	if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("sqlite store: open %q: is a directory", path)
	}

	sf, err := acquireFile(ctx, abs, cfg)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: open %q: %w", path, err)
	}
	return &Store{
		path:   abs,
		shared: sf,
		w:      sf.w,
		r:      sf.r,
		hub:    &sf.hub,
		now:    cfg.now,
		stmts:  make(map[string]*sql.Stmt),
		rstmts: make(map[string]*sql.Stmt),
	}, nil
}

// Path returns the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// DB returns the writer handle: one connection whose transactions begin IMMEDIATE. Applications use it
// to begin a transaction on the same file for InsertSQLTx. It is shared by every Store on the file in
// this process and stays open until the last of them is closed; do not close it yourself.
//
// A transaction on DB holds the only writer connection until it ends: keep it short, and do not call
// other Store methods while it is open (they wait for the connection).
func (s *Store) DB() *sql.DB { return s.w }

// Notifier returns the in-process hub shared by every Store opened on the same file in this process.
func (s *Store) Notifier() store.Notifier { return s.hub }

// Close releases the Store. The file's connections are closed when the last Store on it in this
// process is closed. Close is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.stmtMu.Lock()
		for _, st := range s.stmts {
			_ = st.Close()
		}
		for _, st := range s.rstmts {
			_ = st.Close()
		}
		s.stmts, s.rstmts = nil, nil
		s.stmtMu.Unlock()
		s.closeErr = releaseFile(s.shared)
	})
	return s.closeErr
}

// now returns the store's clock in unix microseconds and as a time.Time truncated to microseconds.
func (s *Store) nowMicro() (int64, time.Time) {
	t := s.now()
	us := t.UnixMicro()
	return us, time.UnixMicro(us).UTC()
}

// stmt returns the writer's prepared statement for query, preparing it on first use. The lock is not
// held while preparing, which waits for the writer connection: a transaction holding that connection
// may look statements up meanwhile (txRunner.prepared).
func (s *Store) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	st, err := s.cachedStmt(ctx, s.w, func() map[string]*sql.Stmt { return s.stmts }, query)
	return st, s.schemaHint(err)
}

// readStmt returns the readers' prepared statement for query, a constant query read often (see
// rstmts), preparing it on first use. Its callers add the schema hint to errors, as they do to a
// query's.
func (s *Store) readStmt(ctx context.Context, query string) (*sql.Stmt, error) {
	return s.cachedStmt(ctx, s.r, func() map[string]*sql.Stmt { return s.rstmts }, query)
}

// readQuery runs query, a constant query read often, on a reader through its prepared statement.
func (s *Store) readQuery(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := s.readStmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// readRow is readQuery for a query of one row. A failure to prepare comes out of its Scan.
func (s *Store) readRow(ctx context.Context, query string, args ...any) rowScanner {
	st, err := s.readStmt(ctx, query)
	if err != nil {
		return errRow{err}
	}
	return st.QueryRowContext(ctx, args...)
}

// errRow is a row whose Scan fails with err.
type errRow struct{ err error }

// Scan returns the row's error.
func (r errRow) Scan(...any) error { return r.err }

// errStoreClosed is every call's error once the store is closed.
var errStoreClosed = fmt.Errorf("sqlite store: %w", store.ErrClosed)

// cachedStmt returns the statement of query in the cache that cache returns (read under stmtMu; nil
// once the store is closed), preparing it on db on first use.

func (s *Store) cachedStmt(ctx context.Context, db *sql.DB, cache func() map[string]*sql.Stmt, query string) (*sql.Stmt, error) {
	s.stmtMu.Lock()
	stmts := cache()
	if stmts == nil {
		s.stmtMu.Unlock()
		return nil, errStoreClosed
	}
	st, ok := stmts[query]
	s.stmtMu.Unlock()
	if ok {
		return st, nil
	}
	st, err := db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	if stmts = cache(); stmts == nil {
		_ = st.Close()
		return nil, errStoreClosed
	}
	if prev, ok := stmts[query]; ok { // prepared by another caller meanwhile
		_ = st.Close()
		return prev, nil
	}
	stmts[query] = st
	return st, nil
}

// schemaHint adds the likely cause to an error about a missing table.
func (s *Store) schemaHint(err error) error {
	if err != nil && containsNoSuchTable(err) {
		return fmt.Errorf("%w (database %s has no pronto schema: run Migrate)", err, s.path)
	}
	return err
}

// insertNew runs an INSERT ... ON CONFLICT DO NOTHING of one row: a row already there gives
// store.ErrDuplicate. what starts every error message, such as `create schema "x"`.
func (s *Store) insertNew(ctx context.Context, what, query string, args ...any) error {
	res, err := s.w.ExecContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", what, s.schemaHint(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	} else if n == 0 {
		return fmt.Errorf("%s: %w", what, store.ErrDuplicate)
	}
	return nil
}

// rowError words the error of reading the one row a statement returns: no row is
// store.ErrNotFound. what starts the message, such as `schema "x"`.
func (s *Store) rowError(what string, err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	return fmt.Errorf("%s: %w", what, s.schemaHint(err))
}

// sharedFile is the state every Store on one file in this process shares.
type sharedFile struct {
	key  string
	refs int // guarded by filesMu
	// opened is closed once open has returned (a failed entry is first removed from files). Until
	// then only the Open that created the entry touches the fields below.
	opened chan struct{}
	w      *sql.DB
	r      *sql.DB
	hub    notifyhub.Hub
	hook   *hookConnector
	keeper *fileKeeper
}

var (
	// filesMu guards files and every sharedFile's refs. It is never held while a file opens or
	// closes, which may wait up to the busy timeout for another process's lock: the Opens and
	// Closes of other files must not wait with it.
	filesMu sync.Mutex
	// files holds each path's current entry, opened or still opening.
	files = map[string]*sharedFile{}
)

// acquireFile returns the shared handles of the file at abs, opening them on first use, or when the
// file at abs is no longer the one they opened (deleted or replaced since): the Stores holding the
// old handles keep them, and later Opens share the new ones. An Open that finds the file being
// opened by another waits for it within its own ctx, and opens the file itself if that one failed.
func acquireFile(ctx context.Context, abs string, cfg config) (*sharedFile, error) {
	for {
		filesMu.Lock()
		sf, ok := files[abs]
		if ok {
			select {
			case <-sf.opened:
			default:
				filesMu.Unlock()
				select {
				case <-sf.opened: // opened, or failed and removed from files: look again
					continue
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			if sf.keeper.isCurrent() {
				sf.refs++
				filesMu.Unlock()
				return sf, nil
			}
		}
		sf = &sharedFile{key: abs, refs: 1, opened: make(chan struct{}), keeper: newFileKeeper(abs, cfg)}
		files[abs] = sf
		filesMu.Unlock()

		err := sf.open(ctx, cfg)
		filesMu.Lock()
		if err != nil && files[abs] == sf {
			delete(files, abs)
		}
		close(sf.opened)
		filesMu.Unlock()
		if err != nil {
			return nil, explainOpenError(abs, err)
		}
		return sf, nil
	}
}

// open opens the handles of the file at sf.key, creating it if missing, and puts it in WAL mode.
// On failure it closes whatever it opened.
func (sf *sharedFile) open(ctx context.Context, cfg config) error {
	uri := (&url.URL{Scheme: "file", Path: sf.key}).String()
	busy := cfg.busyTimeout.Milliseconds()
	// The writer's connector enters WAL mode itself, waiting for other writers (enterWAL).
	writerDSN := fmt.Sprintf("%s?_pragma=busy_timeout(%d)&_pragma=synchronous(NORMAL)"+
		"&_pragma=foreign_keys(on)&_pragma=cache_size(-8192)&_pragma=journal_size_limit(%d)&_txlock=immediate",
		uri, busy, walCheckpointBytes)
	readerDSN := fmt.Sprintf("%s?_pragma=busy_timeout(%d)&_pragma=synchronous(NORMAL)&_query_only=1", uri, busy)

	hook, err := newHookConnector(writerDSN, &sf.hub, cfg.busyTimeout, sf.keeper.wrote)
	if err != nil {
		return err
	}
	sf.hook = hook
	sf.w = sql.OpenDB(hook)
	sf.w.SetMaxOpenConns(1)
	sf.w.SetMaxIdleConns(1)
	sf.w.SetConnMaxLifetime(0)
	sf.w.SetConnMaxIdleTime(0)
	fail := func(err error) error {
		sf.keeper.stop()
		if sf.r != nil {
			_ = sf.r.Close()
		}
		_ = sf.w.Close()
		sf.keeper.gate.closeWalGate()
		hook.forget()
		return err
	}
	if err := checkDB(ctx, sf.w); err != nil {
		return fail(err)
	}
	// The database exists now: its gate file gets its permissions. Without one (see openWalGate),
	// checkpoints hold back this process's reads only.
	sf.keeper.gate.setWalGate(openWalGate(sf.key))
	readers, err := sqlite.NewConnector(readerDSN)
	if err != nil {
		return fail(err)
	}
	sf.r = sql.OpenDB(&gatedConnector{base: readers, gate: sf.keeper.gate})
	sf.r.SetMaxOpenConns(cfg.readConns)
	sf.r.SetMaxIdleConns(cfg.readConns)
	sf.r.SetConnMaxLifetime(0)
	sf.r.SetConnMaxIdleTime(0)
	if err := checkDB(ctx, sf.r); err != nil {
		return fail(err)
	}
	if err := sf.keeper.start(sf.w, sf.r); err != nil {
		return fail(err)
	}
	return nil
}

// explainOpenError adds what SQLite's own message leaves out to an error opening the file at abs.
func explainOpenError(abs string, err error) error {
	dir, base := filepath.Split(abs)
	dir = filepath.Clean(dir)
	switch code := sqliteCode(err); {
	case code&0xff == sqlite3.SQLITE_CANTOPEN:
		// The file may be readable, but WAL mode needs its -wal and -shm files beside it.
		if werr := checkDirWritable(dir); werr != nil {
			return fmt.Errorf("directory %q is not writable (%v): SQLite in WAL mode must create %s-wal and %s-shm there: %w",
				dir, werr, base, base, err)
		}
	case code == sqlite3.SQLITE_IOERR_SHMSIZE, code&0xff == sqlite3.SQLITE_FULL:
		return fmt.Errorf("no room in %q for %s, %s-wal or %s-shm to grow (is the disk or a quota full?): %w",
			dir, base, base, base, err)
	}
	return err
}

// checkDirWritable reports why a file cannot be created in dir, or nil if it can.
func checkDirWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".pronto-write-check-*")
	if err != nil {
		if pe, ok := errors.AsType[*os.PathError](err); ok {
			return pe.Err
		}
		return err
	}
	_ = f.Close()
	return os.Remove(f.Name())
}

// checkDB opens a connection and reads the schema, which fails on a file that is not a database.
func checkDB(ctx context.Context, db *sql.DB) error {
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema").Scan(&n); err != nil {
		return err
	}
	return nil
}

// releaseFile drops one reference to sf, closing its handles with the last one. They are closed
// outside filesMu: an Open of the path meanwhile opens fresh handles, as SQLite lets several
// connections of one process share a file.
func releaseFile(sf *sharedFile) error {
	filesMu.Lock()
	sf.refs--
	last := sf.refs == 0
	if last && files[sf.key] == sf { // else the file was replaced, and files holds the new one's handles
		delete(files, sf.key)
	}
	filesMu.Unlock()
	if !last {
		return nil
	}
	sf.keeper.stop()
	errR := sf.r.Close()
	sf.keeper.gate.closeWalGate()
	errW := sf.w.Close()
	sf.hook.forget()
	return errors.Join(errW, errR)
}
