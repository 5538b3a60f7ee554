package sqlite

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"
)

// The gate file (<database>-pronto-gate) lets the read gates of every pronto process on one database
// cooperate, so that a forced checkpoint holds back the reads of other processes too: SQLite cannot
// restart the log while any process keeps starting reads on it. Its locks are advisory and guard no
// data: a process that ignores them (the sqlite3 shell, another program) only keeps the log from
// restarting, as before. Each is one byte of the file, locked per descriptor (walgate_linux.go), and
// the kernel drops them all when a process dies.
const (
	// gateIntent is held exclusively by a checkpointer from before it waits for the reads until it
	// has checkpointed; a reader process holds it shared only while it takes gateRead, so that no
	// process starts reading while a checkpointer waits.
	gateIntent int64 = iota
	// gateRead is held shared by each process whose reads are running (taken once for a run of
	// reads, not per read), and exclusively by a checkpointer once every process's reads have ended.
	gateRead
	// gateLong is held shared by a process with a read older than walReadPauseWait: checkpointers
	// fail at once while it is held, rather than holding every process's reads back for a wait that
	// cannot succeed (the log cannot restart under that read).
	gateLong
)

const (
	// walGateProbe is how often a process whose reads hold gateRead looks for a checkpointer waiting
	// for them, and for reads of its own grown long.
	walGateProbe = 2 * time.Millisecond
	// walGateIdle is how long a process holds gateRead with no read running before it lets it go
	// (and stops looking): reads in quick succession take it once.
	walGateIdle = 50 * time.Millisecond
	// walGateReadWait bounds how long a read waits for another process's checkpoint to end, after
	// which it reads anyway (the locks guard no data). A checkpointer holds gateIntent for at most
	// walReadPauseWait plus its checkpoint.
	walGateReadWait = 2 * walReadPauseWait
)

// errGateWait is a read's error, internal, when the gate's wait ran out.
var errGateWait = errors.New("another process's checkpoint outlasted the wait")

// walGate is this process's pair of descriptors of the gate file of one database: the readers'
// (rd), through which the process's reads hold gateRead, and the checkpointer's (ck). They must be
// two: a descriptor's own locks never conflict with each other.
type walGate struct {
	rd, ck *gateFile
}

// openWalGate opens the gate file of the database at dbPath, creating it with the database's
// permissions. It returns nil (the gate then works within this process only) where the locks are
// not available or the file cannot be opened, as in a directory this process may not write.
func openWalGate(dbPath string) *walGate {
	if !walGateSupported {
		return nil
	}
	fi, err := os.Stat(dbPath)
	if err != nil {
		return nil
	}
	path := dbPath + "-pronto-gate"
	perm := fi.Mode().Perm()
	_, statErr := os.Stat(path)
	rd, err := openGateFile(path, perm)
	if err != nil {
		// Said once per open: without the file, other processes' constant reads can grow the log.
		slog.Warn("sqlite store: cannot open the gate file; reads of other processes will not be held back for checkpoints",
			slog.String("path", path), slog.String("error", err.Error()))
		return nil
	}
	if os.IsNotExist(statErr) {
		_ = rd.chmod(perm) // as the -wal and -shm files: whoever may write the database may lock
	}
	ck, err := openGateFile(path, perm)
	if err != nil {
		_ = rd.close()
		return nil
	}
	return &walGate{rd: rd, ck: ck}
}

// close closes the descriptors, releasing every lock this process holds on the gate.
func (x *walGate) close() {
	_ = x.rd.close()
	_ = x.ck.close()
}

// sleepCtx waits d, or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// enterRead takes gateRead shared for this process's reads, first waiting, within wait and ctx,
// for a checkpointer holding gateIntent.
func (x *walGate) enterRead(ctx context.Context, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	pause := 100 * time.Microsecond
	for {
		ok, err := x.rd.tryLock(gateIntent, false)
		if err != nil {
			return err
		}
		if ok {
			ok, err = x.rd.tryLock(gateRead, false)
			uerr := x.rd.unlock(gateIntent)
			if err == nil {
				err = uerr
			}
			if err != nil || ok {
				return err
			}
		}
		if time.Now().Add(pause).After(deadline) {
			return errGateWait
		}
		if err := sleepCtx(ctx, pause); err != nil {
			return err
		}
		pause = min(2*pause, walGateProbe)
	}
}

// leaveRead releases this process's gateRead and gateLong.
func (x *walGate) leaveRead() error {
	return errors.Join(x.rd.unlock(gateRead), x.rd.unlock(gateLong))
}

// checkpointWaiting reports whether a checkpointer holds gateIntent.
func (x *walGate) checkpointWaiting() (bool, error) {
	return x.rd.lockedByOther(gateIntent, false)
}

// longRead reports whether a process (this one included) has said it has a long read.
func (x *walGate) longRead() (bool, error) {
	return x.ck.lockedByOther(gateLong, true)
}

// pause holds every other process's new reads back until resume is called, once their running
// reads have ended; this process's reads must be held back (readGate.pause) already. It fails with
// errLongRead at once if a process says it has a long read, or as soon as one does. It waits at
// most wait for the read lock: a process that holds it that long without saying it has a long read
// does not answer (stopped, by SIGSTOP or a debugger), and may read nothing. The lock guards no
// data, so pause then returns without it, the other processes' new reads still held back, and the
// checkpoint is tried: SQLite's read marks decide, within walCheckpointWait.
func (x *walGate) pause(ctx context.Context, wait time.Duration) (resume func(), err error) {
	if long, err := x.longRead(); err != nil {
		return nil, err
	} else if long {
		return nil, errLongRead
	}
	deadline := time.Now().Add(wait)
	intentDeadline := time.Now().Add(walCheckpointWait)
	// gateIntent is held shared by readers for an instant only; exclusively by another checkpointer
	// (of another process, whose writes then wait for its checkpoint) for longer.
	for {
		ok, err := x.ck.tryLock(gateIntent, true)
		if err != nil {
			return nil, err
		}
		if ok {
			break
		}
		if time.Now().After(intentDeadline) {
			return nil, errors.New("another process is checkpointing")
		}
		if err := sleepCtx(ctx, walGateProbe); err != nil {
			return nil, err
		}
	}
	release := func() { _ = x.ck.unlock(gateIntent) }
	pause := 100 * time.Microsecond
	for {
		ok, err := x.ck.tryLock(gateRead, true)
		if err == nil && ok {
			return func() { _ = x.ck.unlock(gateRead); release() }, nil
		}
		if err == nil {
			var long bool
			if long, err = x.longRead(); err == nil && long {
				err = errLongRead
			}
		}
		if err == nil && time.Now().After(deadline) {
			return release, nil
		}
		if err == nil {
			err = sleepCtx(ctx, pause)
			pause = min(2*pause, walGateProbe)
		}
		if err != nil {
			release()
			return nil, err
		}
	}
}
