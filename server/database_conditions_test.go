package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store/postgres"
)

// TestDatabaseConditionAnswers503: a database that cannot serve now for a reason of its own (gone
// read-only after a failover, a lock held past lock_timeout by a migration, a statement past
// statement_timeout, a session ended by an idle timeout) is answered 503 with Retry-After, naming
// the condition in details.reason, never a 500; what the request's data causes stays a 4xx.
func TestDatabaseConditionAnswers503(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	for _, c := range []struct {
		code   string
		status int
		reason string
	}{
		{"25006", 503, "read_only"},
		{"55P03", 503, "lock_timeout"},
		{"57014", 503, "statement_timeout"},
		{"57P05", 503, "idle_session_timeout"},
		{"25P03", 503, "idle_session_timeout"},
		{"57P01", 503, "unavailable"},
		{"08006", 503, "unavailable"},
		{"22003", 400, ""},
		{"23514", 400, ""},
		{"23505", 409, ""},
		{"54000", 400, ""},
		{"42P01", 500, ""},
	} {
		rec := httptest.NewRecorder()
		rec.Header().Set("X-Request-Id", "r1")
		s.writeError(rec, httptest.NewRequest("GET", "/ojs/v1/jobs/x", nil), fromClientError(sqlStateErr(c.code), "job", "x"))
		if rec.Code != c.status {
			t.Errorf("SQLSTATE %s: status %d, want %d: %s", c.code, rec.Code, c.status, rec.Body.Bytes())
			continue
		}
		if c.status != 503 {
			if got := rec.Header().Get("Retry-After"); got != "" {
				t.Errorf("SQLSTATE %s: Retry-After %q on a %d", c.code, got, c.status)
			}
			continue
		}
		checkUnavailable(t, rec.Code, rec.Header(), rec.Body.Bytes(), c.reason)
	}
}

// TestMigrationLockAnswers503: on a real server whose sessions carry lock_timeout (and another
// statement_timeout, and another read-only, as a demoted primary is), a request meeting a
// migration's lock, or writing, is answered 503 with Retry-After naming the condition; once the
// lock is released the same request succeeds.
func TestMigrationLockAnswers503(t *testing.T) {
	ctx := context.Background()
	schema := testdb.Schema(t)
	// The job the requests read, inserted through a store without the session settings.
	plain, err := postgres.New(testdb.NewPool(t, 2), postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	s0, _ := newTestServer(t, Config{Client: newPgClient(t, plain)})
	r := call(t, s0, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[]}`)
	if r.status != 201 {
		t.Fatalf("enqueue: %d %s", r.status, r.raw)
	}
	id := r.body["job"].(map[string]any)["id"].(string)

	locker, err := testdb.NewPool(t, 1).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = locker.Rollback(ctx) }()
	if _, err := locker.Exec(ctx, "LOCK TABLE "+schema+".jobs IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ setting, reason string }{
		{"lock_timeout", "lock_timeout"},
		{"statement_timeout", "statement_timeout"},
	} {
		s, _ := newTestServer(t, Config{Client: newPgClient(t, settingStore(t, schema, c.setting, "100ms"))})
		r := call(t, s, "GET", "/ojs/v1/jobs/"+id, nil)
		checkUnavailable(t, r.status, r.header, r.raw, c.reason)
	}
	if err := locker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	st := settingStore(t, schema, "lock_timeout", "100ms")
	s, _ := newTestServer(t, Config{Client: newPgClient(t, st)})
	if r := call(t, s, "GET", "/ojs/v1/jobs/"+id, nil); r.status != 200 {
		t.Fatalf("after the lock: %d %s", r.status, r.raw)
	}

	ro := settingStore(t, schema, "default_transaction_read_only", "on")
	s, _ = newTestServer(t, Config{Client: newPgClient(t, ro)})
	r = call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[]}`)
	checkUnavailable(t, r.status, r.header, r.raw, "read_only")
}

// checkUnavailable fails unless an answer is a retryable 503 backend_error with Retry-After and
// details.reason.
func checkUnavailable(t *testing.T, status int, header http.Header, raw []byte, reason string) {
	t.Helper()
	if status != 503 {
		t.Fatalf("status %d, want 503 (%s): %s", status, reason, raw)
	}
	if header.Get("Retry-After") == "" {
		t.Fatalf("503 without Retry-After: %s", raw)
	}
	var body struct {
		Error map[string]any `json:"error"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("not JSON: %s", raw)
	}
	e := body.Error
	details, _ := e["details"].(map[string]any)
	if e["code"] != CodeBackendError || e["retryable"] != true || details["reason"] != reason {
		t.Fatalf("want a retryable backend_error with reason %q: %s", reason, raw)
	}
}

// settingStore is a store on the given schema whose sessions carry one setting, as ALTER ROLE ...
// SET gives them.
func settingStore(t *testing.T, schema, name, value string) *postgres.Store {
	t.Helper()
	pool := testdb.NewPoolWith(t, 2, map[string]string{name: value})
	st, err := postgres.New(pool, postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// newPgClient is an insert-only client on st (newTestServer starts it).
func newPgClient(t *testing.T, st *postgres.Store) *pronto.Client {
	t.Helper()
	c, err := pronto.NewClient(st, &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
