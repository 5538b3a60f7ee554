package dashboard_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/pronto-jobs/pronto/dashboard"
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
