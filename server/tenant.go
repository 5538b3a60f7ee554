package server

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/pronto-jobs/pronto"
)

// A job's tenant (ojs-multi-tenancy.md §3): meta.tenant_id, or the X-OJS-Tenant header, which is
// copied into meta.tenant_id when the body has none; both given and different is 400. The tenant is
// stored with the job (pronto.InsertOpts.Tenant), and claims rotate across a queue's tenants
// (docs/fair-scheduling.md). With Config.RequireTenant a job without a tenant is refused with 422
// (§5.1).

var tenantIDKey = []byte(`"tenant_id"`)

// applyTenant sets req's tenant from its meta and the request's X-OJS-Tenant header. field prefixes
// error fields (a batch's "jobs[3]").
func (s *Server) applyTenant(r *http.Request, req *enqueueRequest, field string) *apiError {
	header := r.Header.Get("X-OJS-Tenant")
	if header == "" && !bytes.Contains(req.job.Meta, tenantIDKey) {
		return s.tenantRequired(field)
	}
	if header != "" && !pronto.ValidTenant(header) {
		return invalid("X-OJS-Tenant", "X-OJS-Tenant %q: must be 1 to 255 printable ASCII characters without spaces", header)
	}
	m := map[string]json.RawMessage{}
	if len(req.job.Meta) > 0 && string(req.job.Meta) != "null" {
		if err := json.Unmarshal(req.job.Meta, &m); err != nil {
			return invalid(prefixField(field, "meta"), "meta must be a JSON object")
		}
	}
	tenant := ""
	if raw, ok := m["tenant_id"]; ok && !isNull(raw) {
		f := prefixField(field, "meta.tenant_id")
		var e *apiError
		if tenant, e = wantString(raw, f); e != nil {
			return e
		}
		if !pronto.ValidTenant(tenant) {
			return invalid(f, "%s %q: must be 1 to 255 printable ASCII characters without spaces", f, tenant)
		}
	}
	switch {
	case header != "" && tenant != "" && header != tenant:
		return invalid("X-OJS-Tenant", "X-OJS-Tenant %q and %s %q name different tenants", header, prefixField(field, "meta.tenant_id"), tenant)
	case header != "" && tenant == "":
		tenant = header
		m["tenant_id"], _ = json.Marshal(header)
		meta, err := json.Marshal(m)
		if err != nil {
			return invalid(prefixField(field, "meta"), "meta does not encode: %v", err)
		}
		req.job.Meta = meta
	}
	req.job.Opts.Tenant = tenant
	if tenant == "" {
		return s.tenantRequired(field)
	}
	return nil
}

// tenantRequired refuses a job without a tenant when the server requires one (Config.RequireTenant).
func (s *Server) tenantRequired(field string) *apiError {
	if !s.requireTenant {
		return nil
	}
	return unprocessable(prefixField(field, "meta.tenant_id"), "%s is required: this server requires every job's tenant (meta.tenant_id or the X-OJS-Tenant header)", prefixField(field, "meta.tenant_id"))
}
