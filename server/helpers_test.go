package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/teststore"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

// newTestServer returns a Server over a fresh memory store and a started insert-only client.
func newTestServer(t testing.TB, cfg Config) (*Server, *pronto.Client) {
	t.Helper()
	st := memory.New()
	client := cfg.Client
	if client == nil {
		var err error
		client, err = pronto.NewClient(st, &pronto.Config{})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := client.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfg.Client = client
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = client.Stop(ctx)
		_ = s.Close()
	})
	return s, client
}

// response is a recorded answer.
type response struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

// call sends one request to h.
func call(t testing.TB, h http.Handler, method, path string, body any, hdr ...string) *response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req := httptest.NewRequest(method, path, rd)
	if rd != nil {
		req.Header.Set("Content-Type", "application/openjobspec+json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	res := &response{status: rec.Code, header: rec.Header(), raw: rec.Body.Bytes()}
	if len(res.raw) > 0 {
		if err := json.Unmarshal(res.raw, &res.body); err != nil {
			t.Fatalf("%s %s: response is not a JSON object: %v: %s", method, path, err, res.raw)
		}
	}
	return res
}

// checkErrorBody fails unless r is an OJS error body with the given status and code.
func checkErrorBody(t testing.TB, r *response, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.raw)
	}
	e, ok := r.body["error"].(map[string]any)
	if !ok {
		t.Fatalf("no error object: %s", r.raw)
	}
	if code != "" && e["code"] != code {
		t.Fatalf("error code %v, want %s: %s", e["code"], code, r.raw)
	}
	if msg, _ := e["message"].(string); msg == "" {
		t.Fatalf("error without a message: %s", r.raw)
	}
	if _, ok := e["retryable"].(bool); !ok {
		t.Fatalf("error without retryable: %s", r.raw)
	}
	if rid, _ := e["request_id"].(string); rid == "" || rid != r.header.Get("X-Request-Id") {
		t.Fatalf("error request_id %q does not match X-Request-Id %q", rid, r.header.Get("X-Request-Id"))
	}
	if ct := r.header.Get("Content-Type"); ct != ojsMediaType {
		t.Fatalf("Content-Type %q", ct)
	}
}

// openStore opens a fresh, migrated store of the given kind (teststore.Open).
func openStore(t testing.TB, kind string) store.Store { return teststore.Open(t, kind) }
