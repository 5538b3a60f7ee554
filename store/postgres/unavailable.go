package postgres

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Unavailable reports whether err is pgx's for a server it cannot reach or a connection lost: a
// failed connect, a connection closed under the request, the pool closed, or the server's own word
// that it is going away or not yet up (store.UnavailableClassifier).
func (s *Store) Unavailable(err error) bool {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) || errors.Is(err, pgconn.ErrConnClosed) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && serverGoingAway(pe.Code) {
		return true
	}
	// pgxpool's error for a closed pool is not exported.
	return strings.Contains(err.Error(), "closed pool")
}

// Refused reports whether err is a refusal of the request's data beyond the SQLSTATE classes
// store.IsRefused knows (22, 23, 54): none is. Every other error of the server or of pgx may pass
// when tried again (a lock or statement timeout, a serialization failure, a schema being migrated),
// so implementing store.RefusalClassifier keeps them from being given up on.
func (s *Store) Refused(error) bool { return false }

// serverGoingAway reports whether a SQLSTATE says the server ended or refused the connection for a
// reason of its own (a restart, a crash, a fast shutdown, recovery): class 08, connection exception,
// and 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now. A request that gets one
// during a restart is the store's outage, not the request's fault.
func serverGoingAway(code string) bool {
	switch code {
	case "57P01", "57P02", "57P03":
		return true
	}
	return strings.HasPrefix(code, "08")
}
