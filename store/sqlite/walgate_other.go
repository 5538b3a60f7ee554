//go:build !linux

package sqlite

import (
	"errors"
	"os"
)

// walGateSupported reports whether this platform has the gate file's locks. Outside Linux the store
// has no lock it can rely on per descriptor, and keeps the read pause within each process.
const walGateSupported = false

// gateFile is never opened on this platform.
type gateFile struct{}

// openGateFile fails: see walGateSupported.
func openGateFile(string, os.FileMode) (*gateFile, error) {
	return nil, errors.ErrUnsupported
}

func (*gateFile) tryLock(int64, bool) (bool, error)       { return false, errors.ErrUnsupported }
func (*gateFile) unlock(int64) error                      { return errors.ErrUnsupported }
func (*gateFile) lockedByOther(int64, bool) (bool, error) { return false, errors.ErrUnsupported }
func (*gateFile) close() error                            { return nil }
func (*gateFile) chmod(os.FileMode) error                 { return errors.ErrUnsupported }
