package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/pronto-jobs/pronto/store"
)

// TestSchemaTooNewIsRetryable503: a client halted by incompatible migrations applied under it
// (pronto.Client.SchemaIncompatible) refuses fetches and inserts with an error matching
// store.ErrSchemaTooNew. For an OJS client that is a condition of this server, not of its request:
// a server of the newer release can serve it, so the answer is a retryable 503 naming the reason,
// never the 500 of a failed request.
func TestSchemaTooNewIsRetryable503(t *testing.T) {
	err := fmt.Errorf("pronto: fetch refused: %w: migration(s) 028_future, not marked compatible with older binaries", store.ErrSchemaTooNew)
	e := fromClientError(err, "job", "")
	if e.status != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", e.status)
	}
	if !e.retryable {
		t.Fatal("not retryable")
	}
	if e.code != CodeBackendError {
		t.Fatalf("code %q", e.code)
	}
	if got := e.details["reason"]; got != "schema_too_new" {
		t.Fatalf("details.reason %v", got)
	}
	if e.headers["Retry-After"] == "" {
		t.Fatal("no Retry-After")
	}
	if want := "028_future"; !strings.Contains(e.message, want) {
		t.Fatalf("message %q does not name the migration", e.message)
	}
}
