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
type gateFile struct{ f *os.File }

// openGateFile opens (creating it with perm) the gate file at path.
func openGateFile(path string, perm os.FileMode) (*gateFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, perm)
	if err != nil {
		return nil, err
	}
	return &gateFile{f: f}, nil
}

func (g *gateFile) flock(cmd int, typ int16, b int64) (*syscall.Flock_t, error) {
	lk := &syscall.Flock_t{Type: typ, Whence: 0, Start: b, Len: 1}
	for {
		err := syscall.FcntlFlock(g.f.Fd(), cmd, lk)
		if !errors.Is(err, syscall.EINTR) {
			return lk, err
		}
	}
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
