//go:build unix

package sqlite

import (
	"errors"
	"syscall"
)

// canWrite reports, by access(2), whether this process may write path: nil, or an error that
// errors.Is reports as os.ErrPermission (the file's or directory's modes), os.ErrNotExist, or
// syscall.EROFS (a read-only mount, which access reports whoever asks, root too).
func canWrite(path string) error {
	for {
		err := syscall.Access(path, 0x2) // W_OK
		if err != syscall.EINTR {
			return err
		}
	}
}

// readOnlyFS reports whether err says the file system is mounted read-only.
func readOnlyFS(err error) bool { return errors.Is(err, syscall.EROFS) }
