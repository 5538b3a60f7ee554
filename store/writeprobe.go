package store

import (
	"context"
	"errors"
	"fmt"
)

// ErrReadOnly is the error, wrapped with the backend's own words, of a store whose backend answers
// but takes no writes now: a PostgreSQL standby or a primary fenced read-only by a failover tool, a
// Redis replica, a SQLite file or file system that cannot be written. ConditionOf names it
// ConditionReadOnly and IsUnavailable reports it: the same request may pass once the backend takes
// writes again (a promotion, the fence lifted).
var ErrReadOnly = errors.New("the store takes no writes")

// WriteProbe is implemented by a store that can tell, cheaply, whether its backend takes writes now.
// A read succeeds on a backend that takes no writes, so a readiness probe that only reads keeps a
// load balancer sending work that every insert, fetch and ack then fails.
//
// ProbeWritable costs one round trip at most, writes nothing and takes no lock a writer of the
// store waits for. It returns nil when the backend takes writes, an error wrapping ErrReadOnly (see
// ReadOnlyError) when it does not, and the backend's error when it cannot tell (unreachable, a
// deadline). A store without it (memory) is always writable.
type WriteProbe interface {
	ProbeWritable(ctx context.Context) error
}

// ProbeWritable asks s whether its backend takes writes now (WriteProbe); a store that does not
// implement WriteProbe is taken as writable. s may be nil.
func ProbeWritable(ctx context.Context, s Store) error {
	if p, ok := s.(WriteProbe); ok {
		return p.ProbeWritable(ctx)
	}
	return nil
}

// ReadOnlyError returns an error wrapping ErrReadOnly whose text is the backend's reason, formatted
// as by fmt.Sprintf, for a WriteProbe to return.
func ReadOnlyError(format string, args ...any) error {
	return &readOnlyError{reason: fmt.Sprintf(format, args...)}
}

type readOnlyError struct{ reason string }

func (e *readOnlyError) Error() string { return ErrReadOnly.Error() + ": " + e.reason }

func (e *readOnlyError) Unwrap() error { return ErrReadOnly }
