package dashboard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/dashboard"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// TestSessionPerLogin: each login gets a session of its own; logging out ends it on the server (a
// cookie captured before still gets 401), while another login's session goes on; a cookie whose
// signature or expiry was altered is refused. The session cookie used to be one constant derived
// from the API key, valid until the key changed.
func TestSessionPerLogin(t *testing.T) {
	srv, _ := newDashboard(t, dashboard.Config{APIKey: "k3y"})
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	login := func() *http.Cookie {
		req, _ := http.NewRequest("POST", srv.URL+"/login", strings.NewReader(url.Values{"key": {"k3y"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		for _, ck := range resp.Cookies() {
			if ck.Name == dashboard.CookieName {
				return ck
			}
		}
		t.Fatal("no session cookie")
		return nil
	}
	first := login()
	req, _ := http.NewRequest("POST", srv.URL+"/logout", nil)
	req.AddCookie(first)
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	second := login()
	if first.Value == second.Value {
		t.Errorf("two logins (with a logout between them) got the same session cookie value: sessions are not per-login")
	}
	req, _ = http.NewRequest("GET", srv.URL+"/api/jobs", nil)
	req.AddCookie(first)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the session cookie of a logged-out session still opens /api/jobs: %d, want 401", resp.StatusCode)
	}
	get := func(c *http.Cookie) int {
		req, _ := http.NewRequest("GET", srv.URL+"/api/jobs", nil)
		req.AddCookie(c)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get(second); got != http.StatusOK {
		t.Errorf("the second login's session: %d", got)
	}
	id, rest, _ := strings.Cut(second.Value, ".")
	_, sig, _ := strings.Cut(rest, ".")
	for _, v := range []string{id + ".99999999999." + sig, id + "x." + rest, second.Value + "0", "", "a.b"} {
		if got := get(&http.Cookie{Name: dashboard.CookieName, Value: v}); got != http.StatusUnauthorized {
			t.Errorf("an altered session cookie %q: %d", v, got)
		}
	}
}

// TestLogoutEverywhere: two dashboard servers share one SQLite file and one API key, as two `pronto
// serve` processes behind a load balancer do. A logout on the first ends the session on the second
// too, and on a server started after it (a restart). It used to end it only in the memory of the
// server that received it, so the other server, or the same one restarted, still let the cookie in.
func TestLogoutEverywhere(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sessions.db")
	serve := func() string {
		st, err := sqlite.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		if err := st.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		c, err := pronto.NewClient(st, &pronto.Config{})
		if err != nil {
			t.Fatal(err)
		}
		h, err := dashboard.New(dashboard.Config{Client: c, APIKey: "k3y", Tick: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		t.Cleanup(func() { h.Close(); srv.Close() })
		return srv.URL
	}
	a, b := serve(), serve()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(base, path string, body string, ck *http.Cookie) *http.Response {
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if ck != nil {
			req.AddCookie(ck)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	get := func(base string, ck *http.Cookie) int {
		req, _ := http.NewRequest("GET", base+"/api/jobs", nil)
		req.AddCookie(ck)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	var session, other *http.Cookie
	for _, ck := range post(a, "/login", url.Values{"key": {"k3y"}}.Encode(), nil).Cookies() {
		if ck.Name == dashboard.CookieName {
			session = ck
		}
	}
	for _, ck := range post(b, "/login", url.Values{"key": {"k3y"}}.Encode(), nil).Cookies() {
		if ck.Name == dashboard.CookieName {
			other = ck
		}
	}
	if session == nil || other == nil {
		t.Fatal("no session cookie")
	}
	if got := get(b, session); got != http.StatusOK {
		t.Fatalf("a session made on one server opens the other (same key): %d", got)
	}
	post(a, "/logout", "", session)
	if got := get(a, session); got != http.StatusUnauthorized {
		t.Errorf("after logout, the server that received it: %d, want 401", got)
	}
	// The other server reads the shared list again within a couple of seconds.
	deadline := time.Now().Add(30 * time.Second)
	for get(b, session) != http.StatusUnauthorized {
		if time.Now().After(deadline) {
			t.Fatal("the other server still lets a logged-out session in")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := get(serve(), session); got != http.StatusUnauthorized {
		t.Errorf("a server started after the logout lets the logged-out session in: %d", got)
	}
	if got := get(b, other); got != http.StatusOK {
		t.Errorf("another login's session, after the first one's logout: %d, want 200", got)
	}
}
