package server

import (
	"context"
	"net/http"
	"testing"

	"github.com/pronto-jobs/pronto"
)

// cronTenantServer returns a server requiring every job's tenant over a fresh store of kind, and its
// client.
func cronTenantServer(t *testing.T, kind string) (*Server, *pronto.Client) {
	t.Helper()
	client, err := pronto.NewClient(openStore(t, kind), &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return newTestServer(t, Config{Client: client, RequireTenant: true})
}

// cronTemplateMeta returns the meta of a registration's job template as a response shows it.
func cronTemplateMeta(t *testing.T, r *response) map[string]any {
	t.Helper()
	c, _ := r.body["cron"].(map[string]any)
	tmpl, _ := c["job_template"].(map[string]any)
	meta, _ := tmpl["meta"].(map[string]any)
	if meta == nil {
		t.Fatalf("no job_template.meta: %s", r.raw)
	}
	return meta
}

// TestCronRegistrationTenant: a cron registration names its jobs' tenant as an enqueue does
// (ojs-multi-tenancy.md §5): the X-OJS-Tenant header, copied into the template's meta.tenant_id, or
// meta.tenant_id itself. Different tenants in both are 400, none at all is 422 when the server
// requires a tenant (§5.1), and nothing is registered then. A registration's tenant is kept (Go's
// CronJob.Opts.Tenant, shown as job_template.meta.tenant_id) and every job it fires is that
// tenant's; on every store.
func TestCronRegistrationTenant(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s, client := cronTenantServer(t, kind)
			ctx := context.Background()

			r := call(t, s, "POST", "/ojs/v1/cron", `{"name":"no-tenant","expression":"@every 1s","job_template":{"type":"a.b","args":[]}}`)
			checkErrorBody(t, r, http.StatusUnprocessableEntity, "")
			if f := r.body["error"].(map[string]any)["details"].(map[string]any)["field"]; f != "job_template.meta.tenant_id" {
				t.Fatalf("the refusal names %v, not job_template.meta.tenant_id: %s", f, r.raw)
			}
			r = call(t, s, "POST", "/ojs/v1/cron", `{"name":"two-tenants","expression":"@every 1s","job_template":{"type":"a.b","args":[],"meta":{"tenant_id":"globex"}}}`,
				"X-OJS-Tenant", "acme")
			checkErrorBody(t, r, http.StatusBadRequest, CodeInvalidRequest)
			for _, name := range []string{"no-tenant", "two-tenants"} {
				checkErrorBody(t, call(t, s, "GET", "/ojs/v1/cron/"+name, nil), http.StatusNotFound, "")
			}

			r = mustCall(t, s, http.StatusCreated, "POST", "/ojs/v1/cron",
				`{"name":"by-header","expression":"@every 1s","job_template":{"type":"a.b","args":[],"options":{"queue":"cron-acme"}}}`,
				"X-OJS-Tenant", "acme")
			if got := cronTemplateMeta(t, r)["tenant_id"]; got != "acme" {
				t.Fatalf("job_template.meta.tenant_id %v, want acme: %s", got, r.raw)
			}
			r = mustCall(t, s, http.StatusCreated, "POST", "/ojs/v1/cron",
				`{"name":"by-meta","expression":"@every 1s","job_template":{"type":"a.b","args":[],"meta":{"tenant_id":"globex"},"options":{"queue":"cron-globex"}}}`)
			if got := cronTemplateMeta(t, r)["tenant_id"]; got != "globex" {
				t.Fatalf("job_template.meta.tenant_id %v, want globex: %s", got, r.raw)
			}
			want := map[string]string{"by-header": "acme", "by-meta": "globex"}
			for name, tenant := range want {
				c, err := client.CronGet(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				if c.Opts.Tenant != tenant {
					t.Fatalf("cron %s: Opts.Tenant %q, want %q", name, c.Opts.Tenant, tenant)
				}
			}

			cronCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- s.RunCron(cronCtx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Error(err)
				}
			}()
			for _, tenant := range want {
				j := fetchFrom(t, s, "cron-"+tenant)
				row, err := client.JobGet(ctx, j["id"].(string))
				if err != nil {
					t.Fatal(err)
				}
				if row.Tenant != tenant {
					t.Fatalf("a job of %s's cron has tenant %q", tenant, row.Tenant)
				}
				if meta, _ := j["meta"].(map[string]any); meta["tenant_id"] != tenant {
					t.Fatalf("a job of %s's cron shows meta %v", tenant, j["meta"])
				}
				r := mustCall(t, s, http.StatusOK, "GET", "/ojs/v1/admin/tenants/"+tenant+"/jobs", nil)
				if items, _ := r.body["items"].([]any); len(items) == 0 {
					t.Fatalf("the tenant's jobs list none of its cron's jobs: %s", r.raw)
				}
			}
		})
	}
}

// TestCronTenantGoRegistration: a registration made through Go with CronJob.Opts.Tenant keeps it,
// shows it over HTTP as job_template.meta.tenant_id, and fires jobs of that tenant; on every store.
func TestCronTenantGoRegistration(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s, client := cronTenantServer(t, kind)
			ctx := context.Background()
			_, err := client.CronRegister(ctx, pronto.CronJob{Name: "go-cron", Expression: "@every 1s", Kind: "a.b",
				Opts: pronto.InsertOpts{Queue: "cron-go", Tenant: "initech"}})
			if err != nil {
				t.Fatal(err)
			}
			r := mustCall(t, s, http.StatusOK, "GET", "/ojs/v1/cron/go-cron", nil)
			if got := cronTemplateMeta(t, r)["tenant_id"]; got != "initech" {
				t.Fatalf("job_template.meta.tenant_id %v, want initech: %s", got, r.raw)
			}
			cronCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- s.RunCron(cronCtx) }()
			j := fetchFrom(t, s, "cron-go")
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			row, err := client.JobGet(ctx, j["id"].(string))
			if err != nil {
				t.Fatal(err)
			}
			if row.Tenant != "initech" {
				t.Fatalf("the cron's job has tenant %q, want initech", row.Tenant)
			}
		})
	}
}
