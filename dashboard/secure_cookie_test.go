package dashboard_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/pronto-jobs/pronto/dashboard"
)

// TestSessionCookieSecureBehindTrustedProxy: behind a TLS-terminating proxy the request reaches the
// dashboard in plain HTTP, so the session cookie was never Secure. With TrustForwardedProto the
// proxy's X-Forwarded-Proto: https makes it Secure (login and logout); without it the header, which
// any client can send, changes nothing.
func TestSessionCookieSecureBehindTrustedProxy(t *testing.T) {
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	cookie := func(base, path, proto string) *http.Cookie {
		t.Helper()
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(url.Values{"key": {"k3y"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if proto != "" {
			req.Header.Set("X-Forwarded-Proto", proto)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		for _, c := range resp.Cookies() {
			if c.Name == dashboard.CookieName {
				return c
			}
		}
		t.Fatalf("POST %s (X-Forwarded-Proto %q): no session cookie set (%d)", path, proto, resp.StatusCode)
		return nil
	}
	trusted, _ := newDashboard(t, dashboard.Config{APIKey: "k3y", TrustForwardedProto: true})
	for _, path := range []string{"/login", "/logout"} {
		if c := cookie(trusted.URL, path, "https"); !c.Secure {
			t.Errorf("POST %s behind a trusted proxy saying https: cookie not Secure", path)
		}
		if c := cookie(trusted.URL, path, "http"); c.Secure {
			t.Errorf("POST %s behind a trusted proxy saying http: cookie Secure, so the browser would drop it", path)
		}
	}
	if c := cookie(trusted.URL, "/login", "https, http"); !c.Secure {
		t.Error("the first hop of X-Forwarded-Proto (https) not honoured")
	}
	untrusted, _ := newDashboard(t, dashboard.Config{APIKey: "k3y"})
	if c := cookie(untrusted.URL, "/login", "https"); c.Secure {
		t.Error("X-Forwarded-Proto honoured without TrustForwardedProto")
	}
}
