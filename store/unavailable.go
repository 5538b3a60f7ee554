package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"syscall"
)

// Two questions are asked of a store's errors, and they are answered here, for every store alike:
//
//   - IsUnavailable: the backend cannot be reached or cannot serve now, and the request was not at
//     fault (the HTTP API answers 503 with Retry-After; a bulk operation stops).
//   - IsRefused: the backend refuses the request's own data, so the same request fails however
//     often it is tried (a value out of range, a constraint violated, a row too large). Only such
//     an error is ever given up on by the machinery that writes what a client must not lose (the
//     completer's outcomes): any other error, known to be temporary or not, is tried again with
//     backoff, since an outcome given up is a job that runs again.

// UnavailableClassifier is implemented by a store whose client library has errors of its own for a
// backend it cannot reach or that cannot serve now (a pool closed or timed out, a server loading its
// data set or failing over), beyond the generic signs IsUnavailable knows.
type UnavailableClassifier interface {
	// Unavailable reports whether err is such an error.
	Unavailable(err error) bool
}

// RefusalClassifier is implemented by a store that tells the errors its backend gives for the
// request's own data from all others (see IsRefused). A store that does not implement it has every
// error that is not IsUnavailable taken for a refusal.
type RefusalClassifier interface {
	// Refused reports whether err, beyond the SQLSTATE classes IsRefused knows, is the backend
	// refusing the request's data.
	Refused(err error) bool
}

// IsUnavailable reports whether err, returned by s, means its backend could not be reached or cannot
// serve now (down, restarting, unreachable, out of connections, read-only, busy past a timeout): the
// same request may succeed later and nothing about it was wrong. The HTTP API answers such errors 503
// with Retry-After (OJS BACKEND_UNAVAILABLE) rather than 500.
//
// It knows ErrClosed, ErrReadOnly, network errors, a connection closed under a request,
// database/sql's connection errors and PostgreSQL's SQLSTATEs for a server that refuses, drops or
// cannot serve the request now (see unavailableSQLState); a store adds its client library's own
// through UnavailableClassifier. s may be nil.
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

// IsRefused reports whether err, returned by s, means the backend refuses the request's own data:
// trying the same request again can only fail again. It knows ErrInvalidParams and the SQLSTATE
// classes of RefusedSQLState; a store that implements RefusalClassifier adds its client library's
// own, and says so that no other error is a refusal. For a store that does not (or a nil s), every
// error that is not IsUnavailable, nor a context's, counts as refused, as it cannot be told apart.
//
// An error that is not refused may pass if tried again: a lock or statement timeout, a serialization
// failure or deadlock, a server gone read-only after a failover, as well as an unreachable backend.
func IsRefused(s Store, err error) bool {
	if err == nil || IsUnavailable(s, err) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	if _, ok := RefusedSQLState(err); ok || errors.Is(err, ErrInvalidParams) {
		return true
	}
	if c, ok := s.(RefusalClassifier); ok {
		return c.Refused(err)
	}
	return true
}

// RefusedSQLState returns the SQLSTATE of err when it says the request's data is at fault: class 22,
// data exception; 23, integrity constraint violation; 54, program limit exceeded (such as an index
// row too large).
func RefusedSQLState(err error) (string, bool) {
	var se interface{ SQLState() string }
	if !errors.As(err, &se) {
		return "", false
	}
	code := se.SQLState()
	if len(code) != 5 {
		return "", false
	}
	switch code[:2] {
	case "22", "23", "54":
		return code, true
	}
	return "", false
}

func genericUnavailable(err error) bool {
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return true
	}
	for _, target := range []error{
		syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE,
		syscall.ENETUNREACH, syscall.EHOSTUNREACH,
		io.EOF, io.ErrUnexpectedEOF, net.ErrClosed, sql.ErrConnDone, driver.ErrBadConn, ErrClosed, ErrReadOnly,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	var se interface{ SQLState() string }
	return errors.As(err, &se) && unavailableSQLState(se.SQLState())
}

// unavailableSQLState reports whether a PostgreSQL SQLSTATE is the server's condition rather than
// the request's: class 08 (connection exception) and 53 (insufficient resources); 57P01-57P03 (shut
// down, crashed, starting up); 57P05 and 25P03 (a session ended by idle_session_timeout or
// idle_in_transaction_session_timeout); 25006 (read-only: a standby, or a primary demoted by a
// failover); 55P03 (lock_not_available: a lock held past lock_timeout, as by a migration); 57014
// (query_canceled: statement_timeout, or an operator's cancel).
func unavailableSQLState(code string) bool {
	if len(code) != 5 {
		return false
	}
	switch code[:2] {
	case "08", "53":
		return true
	}
	switch code {
	case "57P01", "57P02", "57P03", "57P05", "25P03", "25006", "55P03", "57014":
		return true
	}
	return false
}
