package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/isodur"
)

// Cron endpoints (OJS cron specification): register, list, get, delete.

// decodeCron reads a registration. The job is given as job_template {type, args, meta, options,
// schema}, or, as the HTTP binding's prose has it, by those members at the top level; the schedule
// as expression (or cron).
func decodeCron(body []byte, now time.Time) (*pronto.CronJob, *apiError) {
	c, _, e := decodeCronTemplate(body, now)
	return c, e
}

// decodeCronTemplate is decodeCron that also returns the job template, decoded as an enqueue would
// be, for checking its args against the type's schema.
func decodeCronTemplate(body []byte, now time.Time) (*pronto.CronJob, *enqueueRequest, *apiError) {
	m, e := decodeBody(body, "cron registration")
	if e != nil {
		return nil, nil, e
	}
	c := &pronto.CronJob{}
	str := func(keys ...string) (string, *apiError) {
		for _, k := range keys {
			if v, ok := m.get(k); ok && !isNull(v) {
				return wantString(v, k)
			}
		}
		return "", nil
	}
	if c.Name, e = str("name"); e != nil {
		return nil, nil, e
	}
	if c.Name == "" {
		return nil, nil, invalid("name", "name is required")
	}
	if !pronto.ValidCronName(c.Name) {
		return nil, nil, invalid("name", "name %q: must match [a-z0-9][a-z0-9.-]* (at most 255 characters)", c.Name)
	}
	if c.Expression, e = str("expression", "cron", "schedule"); e != nil {
		return nil, nil, e
	}
	if c.Expression == "" {
		return nil, nil, invalid("expression", "expression is required (a cron expression such as \"*/5 * * * *\")")
	}
	if c.Timezone, e = str("timezone"); e != nil {
		return nil, nil, e
	}
	policy, e := str("overlap_policy")
	if e != nil {
		return nil, nil, e
	}
	if c.OverlapPolicy, e = overlapPolicy(policy); e != nil {
		return nil, nil, e
	}
	if c.Description, e = str("description"); e != nil {
		return nil, nil, e
	}
	if v, ok := m.get("enabled"); ok && !isNull(v) {
		on, e := wantBool(v, "enabled")
		if e != nil {
			return nil, nil, e
		}
		// A registration created disabled is stored paused, in the write that creates it: what a GET
		// of a paused one shows can be sent back as it is.
		c.Paused = !on
	}
	// The zone first, on its own, so that the error names the field that is wrong.
	if _, err := pronto.CronLocation(c.Timezone); err != nil {
		return nil, nil, invalid("timezone", "%s", trimPrefix(err.Error()))
	}
	if _, err := pronto.ParseCron(c.Expression, c.Timezone); err != nil {
		return nil, nil, invalid("expression", "%s", trimPrefix(err.Error()))
	}
	var tmpl object
	if v, ok := m.get("job_template"); ok && !isNull(v) {
		t, e := decodeObject(v, "job_template")
		if e != nil {
			e.details = map[string]any{"field": "job_template"}
			return nil, nil, e
		}
		tmpl = t
	} else {
		// Top-level form: drop the registration's own members before reading the job from it.
		tmpl = nil
		for _, k := range []string{"type", "args", "meta", "options", "schema"} {
			if v, ok := m.get(k); ok {
				tmpl = append(tmpl, member{key: k, val: v})
			}
		}
		if _, ok := tmpl.get("args"); !ok {
			tmpl = append(tmpl, member{key: "args", val: json.RawMessage("[]")})
		}
	}
	req, e := decodeJobMembers(tmpl, now)
	if e != nil {
		e.message = "job_template: " + e.message
		return nil, nil, e
	}
	// A registration keeps the job's queue, priority, retry, timeout, tags, meta, unique policy and
	// rate limit; each occurrence is inserted with them.
	c.Kind, c.Args, c.Opts = req.job.Kind, req.job.Args, req.job.Opts
	if c.Opts.Meta, e = decodeMetaMap(req.job.Meta); e != nil {
		return nil, nil, e
	}
	return c, req, nil
}

// overlapPolicy reads overlap_policy: ojs-cron.md 6.1's skip, allow and cancel_previous, pronto's
// enqueue, and "cancel", openapi.yaml's name for cancel_previous. Empty is the default (skip).
func overlapPolicy(s string) (pronto.CronOverlapPolicy, *apiError) {
	switch p := pronto.CronOverlapPolicy(s); p {
	case "", pronto.CronSkip, pronto.CronAllow, pronto.CronCancelPrevious, pronto.CronEnqueue:
		return p, nil
	case "cancel":
		return pronto.CronCancelPrevious, nil
	}
	return "", invalid("overlap_policy", "overlap_policy %q: must be skip, allow, cancel_previous (or cancel) or enqueue", s)
}

// appendCron appends the OJS view of a registration.
func appendCron(b []byte, c *pronto.CronJob) []byte {
	b = append(b, '{')
	b = appendStringField(b, "name", c.Name)
	b = appendStringField(b, "expression", c.Expression)
	b = appendStringField(b, "cron", c.Expression)
	tz := c.Timezone
	if tz == "" {
		tz = "UTC"
	}
	b = appendStringField(b, "timezone", tz)
	policy := c.OverlapPolicy
	if policy == "" {
		policy = pronto.CronSkip
	}
	b = appendStringField(b, "overlap_policy", string(policy))
	// A registration paused through the Go API or the CLI is a disabled cron job to the binding
	// (ojs-cron.md 2.1, 8.5): enabled false, and no next run (CRON-28) until it is resumed.
	b = appendBoolField(b, "enabled", !c.Paused)
	if c.Paused {
		b = appendStringField(b, "status", "paused")
	} else {
		b = appendStringField(b, "status", "active")
	}
	if c.Description != "" {
		b = appendStringField(b, "description", c.Description)
	}
	// The binding's §13.2 (and the SDKs) read type, args and options at the top level; the
	// conformance cases read them under job_template: answer both.
	start := len(b)
	b = appendStringField(b, "type", c.Kind)
	if len(c.Args) > 0 {
		b = appendRawField(b, "args", c.Args)
	} else {
		b = appendRawField(b, "args", []byte("[]"))
	}
	var ext *ojsExt
	if meta := cronMeta(c); meta != nil {
		var visible json.RawMessage
		visible, ext = splitMeta(meta)
		if visible != nil {
			b = appendRawField(b, "meta", visible)
		}
		if ext != nil && ext.Unknown["schema"] != nil {
			b = appendRawField(b, "schema", ext.Unknown["schema"])
		}
	}
	b = appendCronOptions(appendKey(b, "options"), &c.Opts, ext)
	template := bytes.TrimPrefix(b[start:], []byte{','})
	b = append(appendKey(b, "job_template"), '{')
	b = append(b, template...)
	b = append(b, '}')
	b = appendTimeField(b, "created_at", c.CreatedAt)
	if c.Paused {
		b = append(appendKey(b, "next_run_at"), "null"...)
	} else {
		b = appendTimeField(b, "next_run_at", c.NextRunAt)
	}
	if !c.LastRunAt.IsZero() {
		b = appendTimeField(b, "last_run_at", c.LastRunAt)
	} else {
		b = append(appendKey(b, "last_run_at"), "null"...)
	}
	b = appendIntField(b, "run_count", c.RunCount)
	if c.LastJobID != "" {
		b = appendStringField(b, "last_job_id", c.LastJobID)
	}
	return append(b, '}')
}

// appendCronOptions appends a template's options in the form an enqueue (and so a registration)
// accepts, every one the occurrences are inserted with: what a GET shows, sent back, registers the
// same job again (ojs-http-binding.md 13.2 updates by delete and create).
func appendCronOptions(b []byte, o *pronto.InsertOpts, ext *ojsExt) []byte {
	b = append(b, '{')
	b = appendStringField(b, "queue", queueOr(o.Queue))
	if o.Priority != 0 {
		b = appendIntField(b, "priority", int64(o.Priority))
	}
	if o.Timeout > 0 {
		b = appendIntField(b, "timeout_ms", o.Timeout.Milliseconds())
	}
	if ext != nil && ext.VisibilityMS > 0 {
		b = appendIntField(b, "visibility_timeout_ms", ext.VisibilityMS)
	}
	if o.RetryPolicy != nil {
		b = appendCronRetry(b, o.RetryPolicy, ext)
	}
	if len(o.Tags) > 0 {
		b = appendStrings(appendKey(b, "tags"), o.Tags)
	}
	if o.Unique != nil {
		b = appendUniquePolicy(appendKey(b, "unique"), o.Unique)
	}
	if o.RateKey != "" || o.RateLimit != nil {
		b = appendRatePolicy(appendKey(b, "rate_limit"), o.RateKey, o.RateLimit)
	}
	return append(b, '}')
}

// appendCronRetry appends the retry policy with its on_exhaustion, which pronto keeps in meta.
func appendCronRetry(b []byte, p *pronto.RetryPolicy, ext *ojsExt) []byte {
	rp, err := json.Marshal(p)
	if err != nil || len(rp) < 2 {
		return b
	}
	b = appendKey(b, "retry")
	if ext == nil || ext.OnExhaustion == "" {
		return append(b, rp...)
	}
	b = append(b, rp[:len(rp)-1]...) // the object, open: appendKey adds the comma it needs
	b = appendStringField(b, "on_exhaustion", ext.OnExhaustion)
	return append(b, '}')
}

// appendUniquePolicy appends a unique policy as options.unique is sent: keys, args_keys, meta_keys,
// period, states, on_conflict.
func appendUniquePolicy(b []byte, u *pronto.UniqueOpts) []byte {
	keys := []string{"type"} // the type is always in the fingerprint
	if u.ByQueue {
		keys = append(keys, "queue")
	}
	if u.ByArgs || len(u.ArgsKeys) > 0 {
		keys = append(keys, "args")
	}
	if len(u.MetaKeys) > 0 {
		keys = append(keys, "meta")
	}
	b = appendStrings(appendKey(append(b, '{'), "keys"), keys)
	if len(u.ArgsKeys) > 0 {
		b = appendStrings(appendKey(b, "args_keys"), u.ArgsKeys)
	}
	if len(u.MetaKeys) > 0 {
		b = appendStrings(appendKey(b, "meta_keys"), u.MetaKeys)
	}
	if u.Period > 0 {
		b = appendStringField(b, "period", isodur.Format(u.Period))
	}
	if len(u.States) > 0 {
		states := make([]string, len(u.States))
		for i, st := range u.States {
			states[i] = string(st)
		}
		b = appendStrings(appendKey(b, "states"), states)
	}
	onConflict := u.OnConflict
	if onConflict == "" {
		onConflict = pronto.UniqueReject
	}
	b = appendStringField(b, "on_conflict", string(onConflict))
	return append(b, '}')
}

// appendRatePolicy appends a rate limit as options.rate_limit is sent: key, concurrency, rate
// {limit, period}, on_limit. A limit given without a key was stored under "queue:<queue>", which is
// shown as the key: sent back, it names the same one.
func appendRatePolicy(b []byte, key string, l *pronto.RateLimit) []byte {
	b = append(b, '{')
	if key != "" {
		b = appendStringField(b, "key", key)
	}
	if l != nil {
		if l.MaxActive > 0 {
			b = appendIntField(b, "concurrency", int64(l.MaxActive))
		}
		if l.Rate > 0 && l.Period > 0 {
			b = append(appendKey(b, "rate"), '{')
			b = appendIntField(b, "limit", int64(l.Rate))
			b = appendStringField(b, "period", isodur.Format(l.Period))
			b = append(b, '}')
		}
		if l.OnLimit != "" {
			b = appendStringField(b, "on_limit", string(l.OnLimit))
		}
	}
	return append(b, '}')
}

// cronMeta returns the meta of c's jobs, with their tenant as meta.tenant_id (a registration made
// through Go names it in Opts.Tenant only), or nil for none.
func cronMeta(c *pronto.CronJob) json.RawMessage {
	var meta json.RawMessage
	if c.Opts.Meta != nil {
		var err error
		if meta, err = json.Marshal(c.Opts.Meta); err != nil {
			return nil
		}
	}
	return metaWithTenant(meta, c.Opts.Tenant)
}

func (s *Server) writeCron(w http.ResponseWriter, status int, c *pronto.CronJob, deleted bool) {
	b := getBuf()
	*b = append(*b, `{"cron":`...)
	*b = appendCron(*b, c)
	// cron_job is the binding's name (§13.2) and what the SDKs decode; cron stays for older clients.
	*b = appendRawField(*b, "cron_job", (*b)[len(`{"cron":`):])
	if deleted {
		*b = appendBoolField(*b, "deleted", true)
		*b = appendStringField(*b, "name", c.Name)
	}
	*b = append(*b, '}')
	writeBuf(w, status, b)
}

// POST /ojs/v1/cron
func (s *Server) registerCron(w http.ResponseWriter, r *http.Request) {
	var tmpl *enqueueRequest
	c, ok := readRequest(s, w, r, "cron registration", func(body []byte) (*pronto.CronJob, *apiError) {
		c, req, e := decodeCronTemplate(body, time.Now())
		tmpl = req
		return c, e
	})
	if !ok {
		return
	}
	if e := s.cronTenant(r, c, tmpl); e != nil {
		s.writeError(w, r, e)
		return
	}
	// Occurrences are inserted through the Go client, which validates nothing: check the template now.
	if e := s.checkArgs(r.Context(), tmpl, "job_template"); e != nil {
		s.writeError(w, r, e)
		return
	}
	out, err := s.client.CronRegister(r.Context(), *c)
	if err != nil {
		s.writeError(w, r, fromClientError(err, "cron job", c.Name))
		return
	}
	w.Header().Set("Location", "/ojs/v1/cron/"+out.Name)
	s.writeCron(w, http.StatusCreated, out, false)
}

// cronTenant gives c's jobs the tenant the registration names, as an enqueue does (tenant.go): the
// template's meta.tenant_id or the X-OJS-Tenant header, 400 when they differ, 422 when the server
// requires a tenant and neither names one. Each occurrence's job is then that tenant's.
func (s *Server) cronTenant(r *http.Request, c *pronto.CronJob, tmpl *enqueueRequest) *apiError {
	if e := s.applyTenant(r, tmpl, "job_template"); e != nil {
		return e
	}
	c.Opts.Tenant = tmpl.job.Opts.Tenant
	var e *apiError
	c.Opts.Meta, e = decodeMetaMap(tmpl.job.Meta) // the header's tenant is now in meta too
	return e
}

// GET /ojs/v1/cron: the registrations in name order, paged by limit, offset and cursor (the last
// name of the previous page), as every data-plane list is (ojs-http-binding.md 17); ?enabled=true
// or false keeps those enabled or disabled (paused) only (ojs-cron.md 8.2), before the paging.
func (s *Server) listCron(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p, e := readNamePage(q, pronto.ValidCronName)
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	var enabled *bool
	if v, ok := q["enabled"]; ok {
		if len(v) != 1 || (v[0] != "true" && v[0] != "false") {
			s.writeError(w, r, invalid("enabled", "query parameter enabled=%q: must be true or false", q.Get("enabled")))
			return
		}
		on := v[0] == "true"
		enabled = &on
	}
	cs, err := s.client.CronList(r.Context())
	if err != nil {
		s.writeError(w, r, fromClientError(err, "cron job", ""))
		return
	}
	if enabled != nil {
		cs = slices.DeleteFunc(cs, func(c *pronto.CronJob) bool { return c.Paused == *enabled })
	}
	page, hasMore, next := pageByName(cs, func(c *pronto.CronJob) string { return c.Name }, p)
	b := getBuf()
	list := make([]byte, 0, 512*len(page)+2)
	list = append(list, '[')
	for i, c := range page {
		if i > 0 {
			list = append(list, ',')
		}
		list = appendCron(list, c)
	}
	list = append(list, ']')
	*b = append(*b, '{')
	*b = appendRawField(*b, "crons", list)
	*b = appendRawField(*b, "cron_jobs", list)
	*b = appendNamePagination(*b, len(cs), p, hasMore, next)
	*b = append(*b, '}')
	writeBuf(w, http.StatusOK, b)
}

// GET /ojs/v1/cron/{name}
func (s *Server) getCron(w http.ResponseWriter, r *http.Request, name string) {
	if e := checkPathText(name, "name"); e != nil {
		s.writeError(w, r, e)
		return
	}
	c, err := s.client.CronGet(r.Context(), name)
	if err != nil {
		s.writeError(w, r, fromClientError(err, "cron job", name))
		return
	}
	s.writeCron(w, http.StatusOK, c, false)
}

// DELETE /ojs/v1/cron/{name}
func (s *Server) deleteCron(w http.ResponseWriter, r *http.Request, name string) {
	if e := checkPathText(name, "name"); e != nil {
		s.writeError(w, r, e)
		return
	}
	c, err := s.client.CronDelete(r.Context(), name)
	if err != nil {
		s.writeError(w, r, fromClientError(err, "cron job", name))
		return
	}
	s.writeCron(w, http.StatusOK, c, true)
}
