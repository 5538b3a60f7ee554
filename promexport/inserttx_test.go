package promexport_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/promexport"
	"github.com/pronto-jobs/pronto/store/postgres"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// TestAppTxInsertCountedOnlyWhenCommitted: jobs inserted in the application's transaction (InsertTx
// on PostgreSQL, InsertSQLTx on SQLite) count in ojs_job_enqueued_total and the tenant's
// ojs_tenant_jobs_enqueued_total once the transaction commits, and never when it rolls back. A
// rolled-back insert used to be counted as soon as it returned, though it inserted nothing.
func TestAppTxInsertCountedOnlyWhenCommitted(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st := openStore(t, kind)
			m := promexport.New(&promexport.Options{CacheTTL: time.Nanosecond, TenantLabels: true})
			cfg := &pronto.Config{}
			m.Instrument(cfg)
			client, err := pronto.NewClient(st, cfg)
			require.NoError(t, err)
			defer m.Attach(client)()
			reg := prometheus.NewPedanticRegistry()
			require.NoError(t, reg.Register(m))
			srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
			defer srv.Close()

			// insertInTx inserts jobs in a transaction of the application and ends it.
			insertInTx := func(jobs []pronto.InsertManyParams, commit bool) []*pronto.JobRow {
				t.Helper()
				var rows []*pronto.JobRow
				switch s := st.(type) {
				case *postgres.Store:
					tx, err := s.Pool().Begin(ctx)
					require.NoError(t, err)
					rows, err = client.InsertManyTx(ctx, tx, jobs)
					require.NoError(t, err)
					if commit {
						require.NoError(t, tx.Commit(ctx))
					} else {
						require.NoError(t, tx.Rollback(ctx))
					}
				case *sqlite.Store:
					tx, err := s.DB().BeginTx(ctx, nil)
					require.NoError(t, err)
					rows, err = client.InsertManySQLTx(ctx, tx, jobs)
					require.NoError(t, err)
					if commit {
						require.NoError(t, tx.Commit())
					} else {
						require.NoError(t, tx.Rollback())
					}
				default:
					t.Fatalf("store %T has no application transaction", s)
				}
				return rows
			}
			acme := &pronto.InsertOpts{Tenant: "acme"}
			enqueued := `ojs_job_enqueued_total{queue="default",type="metrics.ok"}`
			tenantEnqueued := `ojs_tenant_jobs_enqueued_total{queue="default",tenant_id="acme"}`

			rolledBack := insertInTx([]pronto.InsertManyParams{{Args: okArgs{}, Opts: acme}}, false)
			_, err = client.JobGet(ctx, rolledBack[0].ID)
			require.ErrorIs(t, err, pronto.ErrNotFound, "the rolled-back job does not exist")
			insertInTx([]pronto.InsertManyParams{{Args: okArgs{}, Opts: acme}, {Args: okArgs{}, Opts: acme}}, true)
			waitSeries(t, srv.URL, map[string]float64{enqueued: 2, tenantEnqueued: 2})

			// Stop ends the commit watches and waits for them: nothing can count the rolled-back
			// job after it returns.
			require.NoError(t, client.Stop(ctx))
			got := scrape(t, srv.URL)
			require.Equal(t, float64(2), got[enqueued], "the committed jobs, and not the rolled-back one")
			require.Equal(t, float64(2), got[tenantEnqueued], "the tenant's committed jobs, and not the rolled-back one")
		})
	}
}

// TestAppTxDuplicateNotCounted: a unique job inserted in the application's transaction that meets its
// key's holder (UniqueIgnore) inserts nothing and is not counted.
func TestAppTxDuplicateNotCounted(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, "sqlite").(*sqlite.Store)
	client, url := instrumentedOn(t, st, &pronto.Config{})
	unique := &pronto.InsertOpts{Unique: &pronto.UniqueOpts{ByArgs: true, OnConflict: pronto.UniqueIgnore}}
	_, err := client.Insert(ctx, okArgs{}, unique)
	require.NoError(t, err)

	tx, err := st.DB().BeginTx(ctx, nil)
	require.NoError(t, err)
	row, err := client.InsertSQLTx(ctx, tx, okArgs{}, unique)
	require.NoError(t, err)
	require.True(t, row.Duplicate)
	require.NoError(t, tx.Commit())

	require.NoError(t, client.Stop(ctx))
	got := scrape(t, url)
	require.Equal(t, float64(1), got[`ojs_job_enqueued_total{queue="default",type="metrics.ok"}`], "the holder only")
}
