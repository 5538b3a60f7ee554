package server

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/cutproxy"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/internal/teststore"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/postgres"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// TestBackendUnavailable: when the store's backend cannot be reached (PostgreSQL or Redis behind a
// connection that is cut, or a SQLite database closed under the server), requests answer 503 with
// Retry-After and a retryable backend_error naming the cause (ojs-http-binding.md 16.2,
// ojs-errors.md BACKEND_UNAVAILABLE), never a 500 or a panic; the health check says disconnected;
// once the backend is back, the same requests succeed and the job stored before the outage is intact.
// The memory store has no backend to lose.
func TestBackendUnavailable(t *testing.T) {
	for _, kind := range []string{"postgres", "redis", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			var st store.Store
			var down, up func()
			switch kind {
			case "postgres", "redis":
				var proxy *cutproxy.Proxy
				st, proxy = storeBehindProxy(t, kind)
				down, up = proxy.Cut, proxy.Mend
			case "sqlite":
				path := filepath.Join(t.TempDir(), "jobs.db")
				s, err := sqlite.Open(ctx, path)
				if err != nil {
					t.Fatal(err)
				}
				st = s
				down = func() { _ = s.Close() }
				up = func() {
					// A closed store stays closed: the server's operator opens the file again, and
					// a new server over it finds what the old one stored.
					s2, err := sqlite.Open(ctx, path)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = s2.Close() })
					st = s2
				}
			}
			t.Cleanup(func() { _ = st.Close() })
			if err := st.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			newServer := func() *Server {
				client, err := pronto.NewClient(st, &pronto.Config{})
				if err != nil {
					t.Fatal(err)
				}
				s, _ := newTestServer(t, Config{Client: client})
				return s
			}
			s := newServer()
			r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"email.send","args":["before"]}`)
			if r.status != 201 {
				t.Fatalf("enqueue: %d %s", r.status, r.raw)
			}
			id := r.body["job"].(map[string]any)["id"].(string)

			down()
			checkBackendErrors(t, s, 503, "unavailable",
				"POST /ojs/v1/jobs", `{"type":"email.send","args":["during"]}`,
				"GET /ojs/v1/jobs/"+id, "",
				"POST /ojs/v1/workers/fetch", `{"queues":["default"]}`,
				"POST /ojs/v1/jobs/batch", `{"jobs":[{"type":"email.send","args":[1]}]}`,
				"GET /ojs/v1/queues", "")
			if r := call(t, s, "GET", "/ojs/v1/health", nil); r.status != 503 ||
				r.body["backend"].(map[string]any)["status"] != "disconnected" {
				t.Fatalf("health while down: %d %s", r.status, r.raw)
			}

			up()
			if kind == "sqlite" {
				s = newServer()
			}
			// The pool finds its connections dead and dials again: wait for the first success
			// rather than for a time.
			deadline := time.Now().Add(30 * time.Second)
			for {
				r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"email.send","args":["after"]}`)
				if r.status == 201 {
					break
				}
				if r.status != 503 || time.Now().After(deadline) {
					t.Fatalf("enqueue after the backend came back: %d %s", r.status, r.raw)
				}
				time.Sleep(20 * time.Millisecond)
			}
			r = call(t, s, "GET", "/ojs/v1/jobs/"+id, nil)
			if r.status != 200 {
				t.Fatalf("get the job stored before: %d %s", r.status, r.raw)
			}
			job := r.body["job"].(map[string]any)
			if job["state"] != "available" || job["args"].([]any)[0] != "before" {
				t.Fatalf("the job stored before the outage changed: %s", r.raw)
			}
			if r := call(t, s, "GET", "/ojs/v1/health", nil); r.status != 200 {
				t.Fatalf("health after: %d %s", r.status, r.raw)
			}
		})
	}
}

// storeBehindProxy opens a fresh store of kind ("postgres" or "redis") whose every connection goes
// through a cutproxy.Proxy, migrated; both are closed when the test ends.
func storeBehindProxy(t *testing.T, kind string) (store.Store, *cutproxy.Proxy) {
	ctx := context.Background()
	var st store.Store
	var p *cutproxy.Proxy
	switch kind {
	case "postgres":
		proxy := cutproxy.New(t, testdb.Addr(t))
		pool := testdb.NewPoolAt(t, proxy.Addr(), 2)
		s, err := postgres.New(pool, postgres.Config{Schema: testdb.Schema(t)})
		if err != nil {
			t.Fatal(err)
		}
		st, p = s, proxy
	case "redis":
		p = cutproxy.New(t, "127.0.0.1:6379")
		return teststore.OpenRedis(t, p.Addr()), p
	default:
		t.Fatalf("no proxy for store %q", kind)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return st, p
}

// TestBackendStalled: a store that stops answering without refusing (a network partition: the
// proxy holds every byte) gets a retryable 504 backend_error once the request's deadline
// (Config.RequestTimeout) passes, rather than a request hanging until the HTTP server's write
// timeout cuts it without an answer; once the network flows again, requests succeed and what was
// stored before is intact.
func TestBackendStalled(t *testing.T) {
	for _, kind := range []string{"postgres", "redis"} {
		t.Run(kind, func(t *testing.T) {
			st, proxy := storeBehindProxy(t, kind)
			client, err := pronto.NewClient(st, &pronto.Config{})
			if err != nil {
				t.Fatal(err)
			}
			s, _ := newTestServer(t, Config{Client: client, RequestTimeout: 300 * time.Millisecond})
			r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"email.send","args":["before"]}`)
			if r.status != 201 {
				t.Fatalf("enqueue: %d %s", r.status, r.raw)
			}
			id := r.body["job"].(map[string]any)["id"].(string)

			proxy.Stall()
			checkBackendErrors(t, s, 504, "timeout",
				"POST /ojs/v1/jobs", `{"type":"email.send","args":["during"]}`,
				"GET /ojs/v1/jobs/"+id, "")
			proxy.Flow()
			deadline := time.Now().Add(30 * time.Second)
			for {
				r := call(t, s, "GET", "/ojs/v1/jobs/"+id, nil)
				if r.status == 200 {
					if j := r.body["job"].(map[string]any); j["state"] != "available" || j["args"].([]any)[0] != "before" {
						t.Fatalf("the job stored before the partition changed: %s", r.raw)
					}
					break
				}
				if (r.status != 504 && r.status != 503) || time.Now().After(deadline) {
					t.Fatalf("get after the network came back: %d %s", r.status, r.raw)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// checkBackendErrors sends each request (method and path, then body, in pairs) and requires a
// retryable backend_error with the given status and details.reason, and Retry-After on a 503.
func checkBackendErrors(t *testing.T, s *Server, status int, reason string, reqs ...string) {
	t.Helper()
	for i := 0; i+1 < len(reqs); i += 2 {
		method, path, _ := strings.Cut(reqs[i], " ")
		var body any
		if reqs[i+1] != "" {
			body = reqs[i+1]
		}
		r := call(t, s, method, path, body)
		checkErrorBody(t, r, status, CodeBackendError)
		e := r.body["error"].(map[string]any)
		if d, _ := e["details"].(map[string]any); e["retryable"] != true || d["reason"] != reason {
			t.Errorf("%s: %s", reqs[i], r.raw)
		}
		if status == 503 && r.header.Get("Retry-After") != unavailableRetryAfter {
			t.Errorf("%s: Retry-After %q", reqs[i], r.header.Get("Retry-After"))
		}
	}
}

// TestHealthTellsBusyFromUnreachable: a PostgreSQL that answers but holds the probe past
// lock_timeout or statement_timeout (a migration's lock) is not "unreachable" nor "disconnected" in
// the health and readiness answers: they name the condition, and the backend stays "connected".
func TestHealthTellsBusyFromUnreachable(t *testing.T) {
	ctx := context.Background()
	schema := testdb.Schema(t)
	plain, err := postgres.New(testdb.NewPool(t, 2), postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	testdb.LockTable(t, schema+".jobs")
	for _, setting := range []string{"lock_timeout", "statement_timeout"} {
		s, _ := newTestServer(t, Config{Client: newPgClient(t, settingStore(t, schema, setting, "100ms"))})
		h := call(t, s, "GET", "/ojs/v1/health", nil)
		backend, _ := h.body["backend"].(map[string]any)
		if h.status != 503 || backend["error"] != setting || backend["status"] != "connected" {
			t.Fatalf("%s: health while another session holds the jobs table's lock: %d %s; want 503 with backend connected, error %q",
				setting, h.status, h.raw, setting)
		}
		rd := call(t, s, "GET", "/ojs/v1/ready", nil)
		if rd.status != 503 || !strings.Contains(string(rd.raw), "backend "+setting) || strings.Contains(string(rd.raw), "unreachable") {
			t.Fatalf("%s: ready: %d %s; want 503 naming \"backend %s\"", setting, rd.status, rd.raw, setting)
		}
	}
}
