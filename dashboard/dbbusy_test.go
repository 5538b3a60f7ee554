package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/dashboard"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store/postgres"
)

// A PostgreSQL that answers but cannot serve (a lock held past lock_timeout by a migration, a
// statement past statement_timeout, a read-only server after a failover) is not "unreachable": the
// dashboard's answers and its live stream name the condition, and an operator is not sent looking
// for a network problem. A server that refuses connections is still "store unreachable".
func TestDashboardTellsBusyDatabaseFromUnreachable(t *testing.T) {
	ctx := context.Background()
	schema := testdb.Schema(t)
	plain, err := postgres.New(testdb.NewPool(t, 2), postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	unlock := testdb.LockTable(t, schema+".jobs")
	for _, c := range []struct {
		setting, problem, label, text string
	}{
		{"lock_timeout", "lock_timeout", "database busy", "database busy: lock timeout"},
		{"statement_timeout", "statement_timeout", "database busy", "database busy: statement timeout"},
	} {
		base := pgDashboard(t, testdb.URL(), schema, c.setting, "100ms")
		code, msg := apiGet(t, base+"/api/overview")
		if code != 503 || !strings.HasPrefix(msg, c.text) || strings.Contains(msg, "unreachable") {
			t.Fatalf("%s: GET /api/overview while another session holds the jobs table's lock: %d %q; want 503 %q…", c.setting, code, msg, c.text)
		}
		d := firstDown(t, base)
		if d.Problem != c.problem || d.Label != c.label || !strings.HasPrefix(d.Message, c.text) {
			t.Fatalf("%s: the live stream's down event is %+v; want problem %q, label %q, message %q…", c.setting, d, c.problem, c.label, c.text)
		}
	}
	unlock()

	base := pgDashboard(t, testdb.URL(), schema, "default_transaction_read_only", "on")
	code, msg := apiPost(t, base, "/api/queues/ro/pause")
	if want := "database read-only: "; code != 503 || !strings.HasPrefix(msg, want) {
		t.Fatalf("pausing a queue on a read-only server: %d %q; want 503 %q…", code, msg, want)
	}

	base = pgDashboard(t, "postgres://postgres@127.0.0.1:1/test?connect_timeout=2", schema, "application_name", "down")
	code, msg = apiGet(t, base+"/api/overview")
	if want := "store unreachable: cannot connect to the store"; code != 503 || msg != want {
		t.Fatalf("GET /api/overview with the server refusing connections: %d %q; want 503 %q", code, msg, want)
	}
	if d := firstDown(t, base); d.Problem != "unreachable" || d.Label != "store unreachable" {
		t.Fatalf("the live stream's down event with the server refusing connections: %+v", d)
	}
}

// pgDashboard serves a dashboard (no API key) over a PostgreSQL store on url and schema whose
// sessions carry one setting, as ALTER ROLE ... SET gives them.
func pgDashboard(t *testing.T, url, schema, name, value string) string {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	cfg.ConnConfig.RuntimeParams[name] = value
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st, err := postgres.New(pool, postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	c, err := pronto.NewClient(st, &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := dashboard.New(dashboard.Config{Client: c, Tick: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { h.Close(); srv.Close() })
	return srv.URL
}

// apiGet returns a dashboard API answer's status and error message.
func apiGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	return apiAnswer(t, resp)
}

// apiPost posts an action with the page's CSRF token.
func apiPost(t *testing.T, base, path string) (int, string) {
	t.Helper()
	code, body := apiPostBody(t, base, path, "")
	return apiAnswer(t, &http.Response{StatusCode: code, Body: io.NopCloser(strings.NewReader(body))})
}

// apiPostBody posts body (JSON) with the page's CSRF token and returns the status and raw answer.
func apiPostBody(t *testing.T, base, path, body string) (int, string) {
	t.Helper()
	resp, err := http.Get(base + "/api/csrf")
	if err != nil {
		t.Fatal(err)
	}
	var tok struct {
		Token string `json:"token"`
	}
	err = json.NewDecoder(resp.Body).Decode(&tok)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
	req.Header.Set("X-CSRF-Token", tok.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func apiAnswer(t *testing.T, resp *http.Response) (int, string) {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	if e.Error == "" {
		return resp.StatusCode, string(b)
	}
	return resp.StatusCode, e.Error
}

// downEvent is the live stream's "down" event.
type downEvent struct {
	Problem string `json:"problem"`
	Label   string `json:"label"`
	Message string `json:"message"`
}

// firstDown reads the live stream until its first "down" event.
func firstDown(t *testing.T, base string) downEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	named := ""
	for sc.Scan() {
		line := sc.Text()
		if ev, ok := strings.CutPrefix(line, "event: "); ok {
			named = ev
			continue
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok && named == "down" {
			var d downEvent
			if err := json.Unmarshal([]byte(data), &d); err != nil {
				t.Fatalf("down event %q: %v", data, err)
			}
			return d
		}
		if line == "" {
			named = ""
		}
	}
	t.Fatalf("the live stream ended without a down event: %v", sc.Err())
	return downEvent{}
}

// A bulk action meeting one job whose row another session holds (past lock_timeout) gives that
// job up with the condition and goes on with the others: the database answered, and nothing says
// the next job is locked too. Jobs meeting the lock in a row (a migration's lock on the table)
// stop it, as a store that cannot serve does.
func TestBulkGoesOnPastOneLockedJob(t *testing.T) {
	ctx := context.Background()
	schema := testdb.Schema(t)
	plain, err := postgres.New(testdb.NewPool(t, 2), postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	pc, err := pronto.NewClient(plain, &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 7 {
		j, err := pc.Insert(ctx, noteArgs{Text: "x"}, &pronto.InsertOpts{Queue: "bulkbusy"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	base := pgDashboard(t, testdb.URL(), schema, "lock_timeout", "100ms")
	locker, err := testdb.NewPool(t, 1).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = locker.Rollback(ctx) }()
	if _, err := locker.Exec(ctx, "SELECT 1 FROM "+schema+".jobs WHERE id = $1 FOR UPDATE", ids[1]); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"action": "cancel", "ids": ids[:3]})
	code, raw := apiPostBody(t, base, "/api/bulk", string(body))
	var r bulkResponse
	_ = json.Unmarshal([]byte(raw), &r)
	if code != 200 || r.Done != 2 || len(r.Failed) != 1 || r.Failed[0].ID != ids[1] ||
		!strings.HasPrefix(r.Failed[0].Error, "database busy: lock timeout") || r.Stopped != "" || r.NotAttempted != 0 {
		t.Fatalf("cancelling 3 jobs, the second locked by another session: %d %s; want 2 done and the second failed with \"database busy: lock timeout…\", not stopped", code, raw)
	}
	if err := locker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	locker, err = testdb.NewPool(t, 1).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = locker.Rollback(ctx) }()
	if _, err := locker.Exec(ctx, "LOCK TABLE "+schema+".jobs IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	body, _ = json.Marshal(map[string]any{"action": "cancel", "ids": ids[3:]})
	code, raw = apiPostBody(t, base, "/api/bulk", string(body))
	_, msg := apiAnswer(t, &http.Response{StatusCode: code, Body: io.NopCloser(strings.NewReader(raw))})
	if code != 503 || !strings.HasPrefix(msg, "database busy: lock timeout") {
		t.Fatalf("cancelling 4 jobs with the table locked: %d %s; want 503 \"database busy: lock timeout…\" (stopped after %d in a row)", code, raw, 3)
	}
}
