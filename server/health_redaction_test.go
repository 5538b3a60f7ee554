package server

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/postgres"
)

// TestHealthHidesBackendDetails: GET /ojs/v1/health and /ojs/v1/ready need no API key (probes), so
// when the store cannot be reached they name the problem's class ("unreachable") and not the store's
// error text, which pgx builds from the connection string (database user, database, host and port:
// ojs-security.md 9.4). A request bearing the API key gets the text as well.
func TestHealthHidesBackendDetails(t *testing.T) {
	const user, db, key = "svc_billing_admin", "prod_billing_ledger", "k-0123456789abcdef0123456789abcdef"
	pool, err := pgxpool.New(context.Background(),
		"postgres://"+user+":hunter2@127.0.0.1:1/"+db+"?connect_timeout=1&pool_max_conns=1")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	st, err := postgres.New(pool, postgres.Config{Schema: "health_unreachable"})
	require.NoError(t, err)
	client, err := pronto.NewClient(st, &pronto.Config{})
	require.NoError(t, err)
	s, err := New(Config{Client: client, APIKey: key})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })

	secrets := []string{user, db, "127.0.0.1:1", "hunter2"}
	h := call(t, s, "GET", "/ojs/v1/health", nil) // no Authorization header
	require.Equal(t, 503, h.status, "%s", h.raw)
	backend := h.body["backend"].(map[string]any)
	require.Equal(t, "disconnected", backend["status"])
	require.Equal(t, "unreachable", backend["error"])
	require.NotContains(t, backend, "error_detail")
	rd := call(t, s, "GET", "/ojs/v1/ready", nil)
	require.Equal(t, 503, rd.status, "%s", rd.raw)
	require.Contains(t, rd.body["reasons"], "backend unreachable")
	for _, r := range []*response{h, rd} {
		for _, secret := range secrets {
			require.NotContains(t, string(r.raw), secret)
		}
	}

	auth := []string{"Authorization", "Bearer " + key}
	h = call(t, s, "GET", "/ojs/v1/health", nil, auth...)
	require.Equal(t, 503, h.status, "%s", h.raw)
	require.Contains(t, h.body["backend"].(map[string]any)["error_detail"], "127.0.0.1:1")
	rd = call(t, s, "GET", "/ojs/v1/ready", nil, auth...)
	require.Contains(t, fmt.Sprint(rd.body["reasons"]), "backend unreachable: ")
	require.Contains(t, fmt.Sprint(rd.body["reasons"]), "127.0.0.1:1")

	wrong := call(t, s, "GET", "/ojs/v1/health", nil, "Authorization", "Bearer not-the-key")
	require.False(t, strings.Contains(string(wrong.raw), "127.0.0.1:1"), "%s", wrong.raw)
}
