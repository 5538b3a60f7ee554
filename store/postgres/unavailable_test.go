package postgres

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestUnavailableServerGoingAway: the errors PostgreSQL sends while it restarts or recovers
// (terminating connection due to administrator command, the database system is starting up, a
// connection exception) are the store's outage, so callers answer 503 rather than 500; a query's
// own error is not.
func TestUnavailableServerGoingAway(t *testing.T) {
	var s Store
	for _, c := range []struct {
		code string
		want bool
	}{
		{"57P01", true},  // admin_shutdown: a fast shutdown or restart
		{"57P02", true},  // crash_shutdown
		{"57P03", true},  // cannot_connect_now: starting up
		{"08006", true},  // connection_failure
		{"08000", true},  // connection_exception
		{"23505", false}, // unique_violation: the request's own
		{"57014", false}, // query_canceled: a statement timeout, not an outage
		{"40001", false}, // serialization_failure
	} {
		err := fmt.Errorf("list jobs: %w", &pgconn.PgError{Code: c.code, Message: "x"})
		if got := s.Unavailable(err); got != c.want {
			t.Errorf("Unavailable(SQLSTATE %s) = %v, want %v", c.code, got, c.want)
		}
	}
	if s.Unavailable(errors.New("syntax error")) {
		t.Error("a plain error is classed unavailable")
	}
}
