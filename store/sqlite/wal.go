package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	sqlite3 "modernc.org/sqlite/lib"
)

const (
	// walCheckpointBytes is the -wal file size past which the store forces a checkpoint that empties
	// the log. SQLite's automatic checkpoint (at 1000 pages, 4 MB) copies the log into the database
	// but cannot restart it while readers keep starting on it, so under constant reads the log grows
	// without bound. It is also the writer's journal_size_limit: a log grown past it shrinks back to
	// it once restarted.
	walCheckpointBytes = 8 << 20
	// walCheckInterval is the least time between two looks at the files, taken after writes only.
	walCheckInterval = 100 * time.Millisecond
	// walReadPauseWait bounds how long a forced checkpoint waits for this process's running reads to
	// end, holding new reads back meanwhile. It is well above what a store's reads usually take, so
	// that constant reads are outlasted; a read that runs longer is waited for once only
	// (readGate.pause).
	walReadPauseWait = time.Second
	// walCheckpointWait bounds how long a forced checkpoint waits for the writer and for other
	// processes' readers of older snapshots, holding the write lock meanwhile: writers wait at most
	// that long.
	walCheckpointWait = 200 * time.Millisecond
	// walCheckpointRetryMax bounds the pause, doubling from 2*walCheckInterval, before retrying a
	// checkpoint that failed other than on a long read of this process (mostly on another process's
	// read): while that read keeps the log from restarting, every retry would hold writes up for
	// walCheckpointWait, to no effect.
	walCheckpointRetryMax = 2 * time.Second
)

// enterWAL switches the file of the connection ex to WAL mode (a no-op if it is in WAL mode already).
// The switch upgrades a read lock to the write lock, an upgrade for which SQLite does not call the
// busy handler: on a file another connection is writing it fails at once with SQLITE_BUSY. So it is
// retried until wait, the busy timeout, runs out.
func enterWAL(ctx context.Context, ex driver.ExecerContext, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	pause := time.Millisecond
	for {
		_, err := ex.ExecContext(ctx, "PRAGMA journal_mode = WAL", nil)
		if err == nil || sqliteCode(err)&0xff != sqlite3.SQLITE_BUSY || time.Now().Add(pause).After(deadline) {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// fileKeeper looks after one database file while this process has it open, after writes: it forces
// a checkpoint when the -wal file passes walCheckpointBytes, and logs an error, once, when the file
// at the path is no longer the one the handles write to (deleted or replaced).
type fileKeeper struct {
	path  string
	ident os.FileInfo // the file as first opened
	w     *sql.DB
	r     *sql.DB
	busy  time.Duration // the writer's busy timeout, restored after a checkpoint
	gate  *readGate     // the reads of r, which a checkpoint holds back

	kick   chan struct{} // capacity 1: a write happened
	cancel context.CancelFunc
	done   chan struct{}
	warned bool
}

// newFileKeeper returns a keeper of the file at path opened with cfg. start runs it.
func newFileKeeper(path string, cfg config) *fileKeeper {
	return &fileKeeper{path: path, busy: cfg.busyTimeout, gate: newReadGate(),
		kick: make(chan struct{}, 1), done: make(chan struct{})}
}

// wrote tells the keeper that a transaction committed. It never blocks: it runs in the commit hook.
func (k *fileKeeper) wrote() {
	select {
	case k.kick <- struct{}{}:
	default:
	}
}

// start records the file's identity and starts the keeper on the writer w and readers r.
func (k *fileKeeper) start(w, r *sql.DB) error {
	fi, err := os.Stat(k.path)
	if err != nil {
		return err
	}
	k.ident, k.w, k.r = fi, w, r
	ctx, cancel := context.WithCancel(context.Background())
	k.cancel = cancel
	go k.run(ctx)
	return nil
}

// stop stops the keeper and waits for it; the writer must still be open. A keeper never started
// stops at once.
func (k *fileKeeper) stop() {
	if k.cancel == nil {
		return
	}
	k.cancel()
	<-k.done
}

// isCurrent reports whether the file at the path is still the one the keeper's handles opened.
func (k *fileKeeper) isCurrent() bool {
	fi, err := os.Stat(k.path)
	return err == nil && os.SameFile(k.ident, fi)
}

// run looks after the file after each write, at most once per walCheckInterval, until ctx is done.
func (k *fileKeeper) run(ctx context.Context) {
	defer close(k.done)
	pace := time.NewTimer(walCheckInterval)
	pace.Stop()
	var backoff time.Duration // after checkpoints that failed: the pause before the next one
	var retryAt time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-k.kick:
		}
		if fi, err := os.Stat(k.path + "-wal"); err == nil && fi.Size() > walCheckpointBytes && !time.Now().Before(retryAt) {
			// Best effort: a checkpoint that fails or runs out of time is tried again after later
			// writes, once its backoff has passed.
			switch err := k.checkpoint(ctx); {
			case err == nil:
				backoff, retryAt = 0, time.Time{}
			case !errors.Is(err, errLongRead): // a long read is waited out for free: see readGate.pause
				backoff = min(max(2*backoff, 2*walCheckInterval), walCheckpointRetryMax)
				retryAt = time.Now().Add(backoff)
			}
		}
		if !k.warned && !k.isCurrent() {
			k.warned = true
			slog.Error("sqlite store: the database file was deleted or replaced while this process has it open; "+
				"this process still writes to the old file, which is lost when its last Store closes: restart the process",
				slog.String("path", k.path))
		}
		pace.Reset(walCheckInterval)
		select {
		case <-ctx.Done():
			pace.Stop()
			return
		case <-pace.C:
		}
	}
}

// checkpoint copies the log into the database and empties it (TRUNCATE: a RESTART that also frees
// the file's space). It first holds back this process's new reads and waits for the running ones to
// end (readGate.pause), then, through the gate file, those of the other pronto processes on the file
// (walGate.pause): readers that keep overlapping hold the log's read marks without a break,
// which no busy wait outlasts. That wait lasts at most walReadPauseWait, and is skipped while a read
// older than that runs, so a long read (an export, an open read transaction) holds up the other
// reads at most once, that long. Then it runs on the writer connection, queued behind the store's
// writes rather than failing against them, and waits at most walCheckpointWait for the readers of
// processes that do not use the gate file, or that hold its read lock without answering (stopped).
// It fails if a wait runs out.
func (k *fileKeeper) checkpoint(ctx context.Context) error {
	x := k.gate.walGate()
	if x != nil {
		// Checked first, not to hold this process's reads back for a pause bound to fail.
		if long, err := x.longRead(); err != nil {
			return fmt.Errorf("look at the gate file: %w", err)
		} else if long {
			return fmt.Errorf("pause other processes' reads: %w", errLongRead)
		}
	}
	resume, err := k.gate.pause(ctx, walReadPauseWait)
	if err != nil {
		return fmt.Errorf("pause reads: %w", err)
	}
	defer resume()
	if x != nil {
		// A little over walReadPauseWait: a process whose read outlasts that says so (gateLong),
		// which fails the pause as a long read, rather than going on to a checkpoint bound to fail.
		resumeOthers, err := x.pause(ctx, walReadPauseWait+10*walGateProbe)
		if err != nil {
			return fmt.Errorf("pause other processes' reads: %w", err)
		}
		defer resumeOthers()
	}

	// Never waits for the writer while holding it: whatever holds the writer and wants a reader waits
	// at most this long.
	wctx, cancelW := context.WithTimeout(ctx, walCheckpointWait)
	defer cancelW()
	conn, err := k.w.Conn(wctx)
	if err != nil {
		return fmt.Errorf("take the writer: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", walCheckpointWait.Milliseconds())); err != nil {
		return err
	}
	var busy, logFrames, copied int
	ckErr := conn.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logFrames, &copied)
	restore := fmt.Sprintf("PRAGMA busy_timeout = %d", k.busy.Milliseconds())
	if _, err := conn.ExecContext(context.WithoutCancel(ctx), restore); err != nil {
		// A writer left with the short timeout would fail where it should wait: drop the connection.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		return err
	}
	if ckErr == nil && busy != 0 {
		ckErr = errors.New("another process's reads outlasted the wait")
	}
	return ckErr
}
