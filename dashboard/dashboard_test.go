package dashboard_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/dashboard"
	"github.com/pronto-jobs/pronto/store/memory"
)

type noteArgs struct {
	Text string `json:"text"`
}

func (noteArgs) Kind() string { return "note.add" }

// newDashboard serves a dashboard over a memory store; the client works nothing, so jobs stay put.
func newDashboard(t *testing.T, cfg dashboard.Config) (*httptest.Server, *pronto.Client) {
	t.Helper()
	c, err := pronto.NewClient(memory.New(), &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Client = c
	cfg.Tick = 50 * time.Millisecond
	h, err := dashboard.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { h.Close(); srv.Close() })
	return srv, c
}

type browser struct {
	t    *testing.T
	base string
	c    *http.Client
	csrf string
}

func newBrowser(t *testing.T, base string) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: base, c: &http.Client{Jar: jar}}
}

func (b *browser) do(method, path, body string, hdr map[string]string) (int, string) {
	b.t.Helper()
	req, err := http.NewRequest(method, b.base+path, strings.NewReader(body))
	if err != nil {
		b.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

var csrfMeta = regexp.MustCompile(`name="csrf-token" content="([0-9a-f]+)"`)

// open loads the page and keeps its CSRF token, as the browser does.
func (b *browser) open() int {
	code, page := b.do("GET", "/", "", nil)
	if m := csrfMeta.FindStringSubmatch(page); m != nil {
		b.csrf = m[1]
	}
	return code
}

func (b *browser) post(path, body string) (int, string) {
	return b.do("POST", path, body, map[string]string{"X-CSRF-Token": b.csrf, "Content-Type": "application/json"})
}

func TestLoginSessionAndCSRF(t *testing.T) {
	srv, c := newDashboard(t, dashboard.Config{APIKey: "k3y"})
	j, err := c.Insert(context.Background(), noteArgs{Text: "hi"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, srv.URL)
	if code := b.open(); code != http.StatusUnauthorized || b.csrf != "" {
		t.Fatalf("before login: status %d, csrf %q; want 401 and the login page", code, b.csrf)
	}
	if code, _ := b.do("GET", "/api/jobs", "", nil); code != http.StatusUnauthorized {
		t.Fatalf("API before login: %d, want 401", code)
	}
	// A wrong key is refused; the right one sets an HttpOnly, SameSite=Strict session cookie.
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	b.do("POST", "/login", "key=nope", form)
	if code := b.open(); code != http.StatusUnauthorized {
		t.Fatalf("after a wrong key: %d, want 401", code)
	}
	req, _ := http.NewRequest("POST", srv.URL+"/login", strings.NewReader(url.Values{"key": {"k3y"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	setCookie := resp.Header.Get("Set-Cookie")
	for _, want := range []string{dashboard.CookieName + "=", "HttpOnly", "SameSite=Strict"} {
		if !strings.Contains(setCookie, want) {
			t.Errorf("Set-Cookie %q lacks %q", setCookie, want)
		}
	}
	if strings.Contains(setCookie, "k3y") {
		t.Errorf("Set-Cookie %q carries the API key itself", setCookie)
	}
	b.do("POST", "/login", "key=k3y", form)
	if code := b.open(); code != http.StatusOK || b.csrf == "" {
		t.Fatalf("after login: status %d, csrf %q", code, b.csrf)
	}
	// Actions need the page's token and the same origin.
	good := b.csrf
	b.csrf = "00" + good[2:]
	if code, body := b.post("/api/jobs/"+j.ID+"/cancel", ""); code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
		t.Fatalf("wrong CSRF token: %d %s, want 403", code, body)
	}
	b.csrf = good
	if code, _ := b.do("POST", "/api/jobs/"+j.ID+"/cancel", "", map[string]string{"X-CSRF-Token": good, "Origin": "https://evil.example"}); code != http.StatusForbidden {
		t.Fatalf("cross-origin action: %d, want 403", code)
	}
	if code, body := b.post("/api/jobs/"+j.ID+"/cancel", ""); code != http.StatusOK || !strings.Contains(body, `"state":"cancelled"`) {
		t.Fatalf("cancel: %d %s", code, body)
	}
}

func TestReadOnlyRefusesActions(t *testing.T) {
	srv, c := newDashboard(t, dashboard.Config{ReadOnly: true})
	j, err := c.Insert(context.Background(), noteArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, srv.URL)
	if code := b.open(); code != http.StatusOK {
		t.Fatalf("open: %d", code)
	}
	if code, body := b.post("/api/jobs/"+j.ID+"/cancel", ""); code != http.StatusForbidden || !strings.Contains(body, "read-only") {
		t.Fatalf("read-only cancel: %d %s", code, body)
	}
	if code, body := b.post("/api/queues/default/pause", ""); code != http.StatusForbidden {
		t.Fatalf("read-only pause: %d %s", code, body)
	}
	if code, _ := b.do("GET", "/api/jobs/"+j.ID, "", nil); code != http.StatusOK {
		t.Fatalf("read-only read: %d", code)
	}
}

// Bad input gets a 4xx naming the problem, never a 500.
func TestBadInput(t *testing.T) {
	srv, _ := newDashboard(t, dashboard.Config{})
	b := newBrowser(t, srv.URL)
	b.open()
	for _, tc := range []struct {
		method, path, body string
		code               int
		want               string
	}{
		{"GET", "/api/jobs/not-an-id", "", 400, "UUIDv7"},
		{"GET", "/api/jobs/01a216cf-9ac1-7065-9b03-7485bc4e05f6", "", 404, "not found"},
		{"GET", "/api/jobs?state=sleeping", "", 400, "unknown state"},
		{"GET", "/api/jobs?queue=Bad%20Queue", "", 400, "queue name"},
		{"GET", "/api/jobs?cursor=xyz", "", 400, "cursor"},
		{"GET", "/api/jobs?limit=0", "", 400, "limit"},
		{"GET", "/api/workflows/nope", "", 400, "UUIDv7"},
		{"POST", "/api/jobs/01a216cf-9ac1-7065-9b03-7485bc4e05f6/explode", "", 404, "unknown job action"},
		{"POST", "/api/jobs/01a216cf-9ac1-7065-9b03-7485bc4e05f6/retry", "", 404, "not found"},
		{"POST", "/api/bulk", "{", 400, "bad request body"},
		{"POST", "/api/bulk", `{"action":"explode","ids":["x"]}`, 400, "unknown bulk action"},
		{"POST", "/api/bulk", `{"action":"retry"}`, 400, "no jobs selected"},
		{"POST", "/api/bulk", `{"action":"retry","filter":"state=sleeping"}`, 400, "unknown state"},
		{"POST", "/api/queues/Bad Queue/pause", "", 400, "queue"},
		{"POST", "/api/cron/nope/pause", "", 404, "not found"},
		{"GET", "/api/jobs?created_after=yesterday", "", 400, "created_after"},
		{"GET", "/api/jobs?finished_before=-5m", "", 400, "RFC 3339"},
		{"GET", "/api/count?state=sleeping", "", 400, "unknown state"},
		{"GET", "/api/count?created_after=soon", "", 400, "created_after"},
		{"GET", "/api/workflows?cursor=nope", "", 400, "cursor"},
		{"POST", "/api/bulk", `{"action":"retry","filter":"created_after=soon"}`, 400, "created_after"},
	} {
		var code int
		var body string
		if tc.method == "GET" {
			code, body = b.do("GET", tc.path, "", nil)
		} else {
			code, body = b.post(strings.ReplaceAll(tc.path, " ", "%20"), tc.body)
		}
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s %s: %d %s; want %d containing %q", tc.method, tc.path, code, strings.TrimSpace(body), tc.code, tc.want)
		}
	}
}

func TestBulkAndEvents(t *testing.T) {
	srv, c := newDashboard(t, dashboard.Config{})
	ctx := context.Background()
	var ids []string
	for i := 0; i < 5; i++ {
		j, err := c.Insert(ctx, noteArgs{}, &pronto.InsertOpts{Queue: "bulk", Tags: []string{"t1"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	b := newBrowser(t, srv.URL)
	b.open()
	body, _ := json.Marshal(map[string]any{"action": "cancel", "ids": ids[:2]})
	if code, resp := b.post("/api/bulk", string(body)); code != 200 || !strings.Contains(resp, `"done":2`) {
		t.Fatalf("bulk cancel by ids: %d %s", code, resp)
	}
	// Everything the filter matches: the three still available.
	if code, resp := b.post("/api/bulk", `{"action":"cancel","filter":"queue=bulk&state=available&tag=t1"}`); code != 200 || !strings.Contains(resp, `"done":3`) {
		t.Fatalf("bulk cancel by filter: %d %s", code, resp)
	}
	// A finished job cannot be cancelled: reported per job, not as a failure of the request.
	if code, resp := b.post("/api/bulk", string(body)); code != 200 || !strings.Contains(resp, `"done":0`) || !strings.Contains(resp, ids[0]) {
		t.Fatalf("bulk cancel of cancelled jobs: %d %s", code, resp)
	}

	// The event stream sends the queue counts.
	req, _ := http.NewRequest("GET", srv.URL+"/api/events", nil)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(cctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("events Content-Type %q", ct)
	}
	buf := make([]byte, 0, 4096)
	chunk := make([]byte, 4096)
	for !strings.Contains(string(buf), `"cancelled":5`) {
		n, err := resp.Body.Read(chunk)
		if err != nil {
			t.Fatalf("event stream ended before showing 5 cancelled jobs: %v; got %s", err, buf)
		}
		buf = append(buf, chunk[:n]...)
	}
}

// The count a bulk confirmation shows, the time windows, run now, and the clients on the overview.
func TestCountWindowsRunNowClients(t *testing.T) {
	srv, c := newDashboard(t, dashboard.Config{})
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		if _, err := c.Insert(ctx, noteArgs{}, &pronto.InsertOpts{Queue: "counted"}); err != nil {
			t.Fatal(err)
		}
	}
	later, err := c.Insert(ctx, noteArgs{}, &pronto.InsertOpts{Queue: "counted", ScheduledAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, srv.URL)
	b.open()
	if code, body := b.do("GET", "/api/count?queue=counted&state=available", "", nil); code != 200 || !strings.Contains(body, `"count":4`) || !strings.Contains(body, `"capped":false`) {
		t.Fatalf("count: %d %s", code, body)
	}
	if code, body := b.do("GET", "/api/jobs?queue=counted&created_after=1h", "", nil); code != 200 || strings.Count(body, `"kind":"note.add"`) != 5 {
		t.Fatalf("created in the last hour: %d %s", code, body)
	}
	if code, body := b.do("GET", "/api/jobs?queue=counted&created_before="+url.QueryEscape(time.Now().Add(-time.Hour).Format(time.RFC3339)), "", nil); code != 200 || !strings.Contains(body, `"jobs":[]`) {
		t.Fatalf("created before an hour ago: %d %s", code, body)
	}
	if code, body := b.post("/api/jobs/"+later.ID+"/run-now", ""); code != 200 || !strings.Contains(body, `"state":"available"`) {
		t.Fatalf("run now: %d %s", code, body)
	}
	if code, body := b.post("/api/jobs/"+later.ID+"/run-now", ""); code != http.StatusConflict {
		t.Fatalf("run now of an available job: %d %s, want 409", code, body)
	}
	if code, body := b.do("GET", "/api/jobs?queue=counted&finished_after=1h", "", nil); code != 200 || !strings.Contains(body, `"jobs":[]`) {
		t.Fatalf("nothing finished: %d %s", code, body)
	}
	// A started client is on the overview; this one never started, so the list is empty.
	if code, body := b.do("GET", "/api/overview", "", nil); code != 200 || !strings.Contains(body, `"clients":[]`) {
		t.Fatalf("overview clients: %d %s", code, body)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	// The client's record is written at Start; its leadership a moment later, when it is elected.
	for deadline := time.Now().Add(15 * time.Second); ; {
		code, body := b.do("GET", "/api/overview", "", nil)
		if code == 200 && strings.Contains(body, `"id":"`+c.ID()+`"`) && strings.Contains(body, `"leader":true`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("overview clients after start: %d %s", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
