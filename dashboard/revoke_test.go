package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/dashboard"
	"github.com/pronto-jobs/pronto/store/memory"
)

// hangingSettingStore is a memory store whose logged-out sessions list cannot be read: every read
// hangs until its context ends, as a frozen or partitioned database's would. It counts the reads.
type hangingSettingStore struct {
	*memory.Store
	reads atomic.Int64
}

func (s *hangingSettingStore) GetSetting(ctx context.Context, key string) (json.RawMessage, error) {
	if key == dashboard.RevokedSetting {
		s.reads.Add(1)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.Store.GetSetting(ctx, key)
}

// With an API key every authenticated request checks the shared logged-out list. When the store
// does not answer, one failed read stands for the requests that waited on it: they use the last
// copy rather than read again one after the other, each waiting out its timeout (N concurrent
// requests used to take N times that timeout).
func TestFailedRevokedListReadServesWaitingRequests(t *testing.T) {
	st := &hangingSettingStore{Store: memory.New()}
	c, err := pronto.NewClient(st, &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := dashboard.New(dashboard.Config{Client: c, APIKey: "k3y", Tick: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { h.Close(); srv.Close() })
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.PostForm(srv.URL+"/login", url.Values{"key": {"k3y"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var session *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == dashboard.CookieName {
			session = ck
		}
	}
	if session == nil {
		t.Fatal("no session cookie")
	}
	const n = 4
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("GET", srv.URL+"/api/jobs", nil)
			req.AddCookie(session)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			codes[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	if got := st.reads.Load(); got != 1 {
		t.Fatalf("%d concurrent requests while the store hangs read the logged-out list %d times, want 1 (codes %v)", n, got, codes)
	}
	for i, code := range codes {
		if code != http.StatusOK {
			t.Fatalf("request %d while the list cannot be read: %d, want 200 (the session was never logged out)", i, code)
		}
	}
}
