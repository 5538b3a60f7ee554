package postgres

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Unavailable reports whether err is pgx's for a server it cannot reach or a connection lost: a
// failed connect, a connection closed under the request, or the pool closed
// (store.UnavailableClassifier).
func (s *Store) Unavailable(err error) bool {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) || errors.Is(err, pgconn.ErrConnClosed) {
		return true
	}
	// pgxpool's error for a closed pool is not exported.
	return strings.Contains(err.Error(), "closed pool")
}
