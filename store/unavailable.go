package store

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"syscall"
)

// UnavailableClassifier is implemented by a store whose client library has errors of its own for a
// backend it cannot reach or that cannot serve now (a pool closed or timed out, a server loading its
// data set or failing over), beyond the generic signs IsUnavailable knows.
type UnavailableClassifier interface {
	// Unavailable reports whether err is such an error.
	Unavailable(err error) bool
}

// IsUnavailable reports whether err, returned by s, means its backend could not be reached or cannot
// serve now (down, restarting, unreachable, out of connections): the same request may succeed later
// and nothing about it was wrong. The HTTP API answers such errors 503 with Retry-After (OJS
// BACKEND_UNAVAILABLE) rather than 500.
//
// It knows ErrClosed, network errors, a connection closed under a request, database/sql's connection errors and
// PostgreSQL's SQLSTATEs for a server that refuses or drops connections (classes 08 and 53, and
// 57P01-57P03: shut down or starting up); a store adds its client library's own through
// UnavailableClassifier. s may be nil.
func IsUnavailable(s Store, err error) bool {
	if err == nil {
		return false
	}
	if genericUnavailable(err) {
		return true
	}
	if c, ok := s.(UnavailableClassifier); ok {
		return c.Unavailable(err)
	}
	return false
}

func genericUnavailable(err error) bool {
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return true
	}
	for _, target := range []error{
		syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE,
		syscall.ENETUNREACH, syscall.EHOSTUNREACH,
		io.EOF, io.ErrUnexpectedEOF, net.ErrClosed, sql.ErrConnDone, driver.ErrBadConn, ErrClosed,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	var se interface{ SQLState() string }
	if errors.As(err, &se) {
		switch code := se.SQLState(); {
		case len(code) != 5:
		case code[:2] == "08", code[:2] == "53":
			return true
		case code == "57P01", code == "57P02", code == "57P03":
			return true
		}
	}
	return false
}
