package sqlite

import (
	"errors"
	"os"
	"syscall"
)

// walGateSupported reports whether this platform has the gate file's locks: Linux's open file
// description (OFD) locks, which belong to one descriptor, so two descriptors of one process
// conflict as two processes do, and closing another descriptor of the file drops nothing (POSIX
// fcntl locks are per process and dropped at any close of the file).
const walGateSupported = true

// The fcntl commands of OFD locks (linux/fcntl.h), which package syscall does not name.
const (
	fOFDGetLK = 36
	fOFDSetLK = 37
)

// gateFile is one descriptor of the gate file, whose bytes are the gate's locks.
type gateFile struct {
	f  *os.File
	rc syscall.RawConn // f's descriptor, used through Control: see flock
}

// openGateFile opens (creating it with perm) the gate file at path.
func openGateFile(path string, perm os.FileMode) (*gateFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, perm)
	if err != nil {
		return nil, err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return &gateFile{f: f, rc: rc}, nil
}

// flock runs the fcntl cmd on byte b. It goes through Control, not f.Fd(), because a read may be
// taking its lock while the last Store closes the file: Control keeps the descriptor open until it
// returns (and fails once it is closed), where f.Fd()'s number could be closed under the call, or
// reused by another file, whose locks the call would then take or drop.
func (g *gateFile) flock(cmd int, typ int16, b int64) (*syscall.Flock_t, error) {
	lk := &syscall.Flock_t{Type: typ, Whence: 0, Start: b, Len: 1}
	var err error
	if cerr := g.rc.Control(func(fd uintptr) {
		for {
			err = syscall.FcntlFlock(fd, cmd, lk)
			if !errors.Is(err, syscall.EINTR) {
				return
			}
		}
	}); cerr != nil {
		return lk, cerr
	}
	return lk, err
}

// tryLock takes the lock of byte b, shared or exclusive, without waiting: false if another
// descriptor holds a conflicting lock.
func (g *gateFile) tryLock(b int64, exclusive bool) (bool, error) {
	typ := int16(syscall.F_RDLCK)
	if exclusive {
		typ = syscall.F_WRLCK
	}
	_, err := g.flock(fOFDSetLK, typ, b)
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) {
		return false, nil
	}
	return err == nil, err
}

// unlock releases this descriptor's lock of byte b.
func (g *gateFile) unlock(b int64) error {
	_, err := g.flock(fOFDSetLK, syscall.F_UNLCK, b)
	return err
}

// lockedByOther reports whether another descriptor holds a lock of byte b that conflicts with a
// shared one (an exclusive lock), or with an exclusive one (any lock) if exclusive.
func (g *gateFile) lockedByOther(b int64, exclusive bool) (bool, error) {
	typ := int16(syscall.F_RDLCK)
	if exclusive {
		typ = syscall.F_WRLCK
	}
	lk, err := g.flock(fOFDGetLK, typ, b)
	if err != nil {
		return false, err
	}
	return lk.Type != syscall.F_UNLCK, nil
}

// close closes the descriptor, which releases its locks.
func (g *gateFile) close() error { return g.f.Close() }

// chmod sets the file's permissions, which the umask may have narrowed at its creation.
func (g *gateFile) chmod(perm os.FileMode) error { return g.f.Chmod(perm) }
