package redis

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// A job is one hash. Its fields, all strings (times in microseconds since the epoch, "0" or absent
// for a zero time; JSON values as given, absent when nil):
//
//	id kind queue args meta prio state attempt max errors result tags rp timeout (ns)
//	created sched started completed expires lease worker token
//	ukey ustates (comma-separated) uuntil tenant rkey wf parents (JSON) runon presults
//	wfl ("1": the keys of its workflow are tagged by its queue, see features.go)
//	tng or tnq (its tenant again, see tenantkeys), rkq ("1": its rate key's counts are its queue's,
//	see ratekeys)
//	p ("1": a plain job, without any of expires, ukey, ustates, tenant, tng, tnq, rkey, rkq, wf, runon, kids, wfl)
//
// A result of "" stands for no result (the finish script overwrites a result with "" rather than
// deleting the field).

// micros encodes t as microseconds since the epoch, "0" for the zero time.
func micros(t time.Time) string {
	if t.IsZero() {
		return "0"
	}
	return strconv.FormatInt(t.UnixMicro(), 10)
}

// fromMicros decodes what micros encoded.
func fromMicros(s string) time.Time {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n == 0 {
		return time.Time{}
	}
	return time.UnixMicro(n).UTC()
}

// insertFields returns the hash fields of a new job, as field, value pairs. The insert script adds
// created (and sched, when p has none). On a cluster a job with a rate key also carries rkq: its
// counts under the key are kept in its queue's slot (see ratekeys in scripts.go). Jobs written by
// earlier versions on a cluster may carry rkeyc instead, a field the scripts do not read: their key
// limits nothing.
func insertFields(p *store.InsertParams, cluster bool) []any {
	f := make([]any, 0, 40)
	add := func(k, v string) { f = append(f, k, v) }
	add("id", p.ID)
	add("kind", p.Kind)
	add("queue", p.Queue)
	add("state", string(p.State))
	add("attempt", "0")
	f = plainFields(f, p)
	add("sched", micros(p.ScheduledAt))
	if !p.ExpiresAt.IsZero() {
		add("expires", micros(p.ExpiresAt))
	}
	if p.UniqueKey != "" {
		add("ukey", p.UniqueKey)
		add("ustates", joinStates(store.UniqueStatesOrDefault(p.UniqueStates)))
		if !p.UniqueUntil.IsZero() {
			add("uuntil", micros(p.UniqueUntil))
		}
	}
	if p.Tenant != "" {
		add("tenant", p.Tenant)
		// The tenant again, for the tenant's counts and job sets (tenant.go): tng keeps them across
		// queues (global keys), tnq per queue on a cluster, where a key spanning queues would span
		// slots.
		if cluster {
			add("tnq", p.Tenant)
		} else {
			add("tng", p.Tenant)
		}
	}
	if p.RateKey != "" {
		add("rkey", p.RateKey)
		if cluster {
			add("rkq", "1")
		}
	}
	if p.WorkflowID != "" {
		add("wf", p.WorkflowID)
	}
	if len(p.ParentIDs) > 0 {
		b, _ := json.Marshal(p.ParentIDs)
		add("parents", string(b))
	}
	if p.RunOn != "" {
		add("runon", string(p.RunOn))
	}
	if p.ExpiresAt.IsZero() && p.UniqueKey == "" && p.Tenant == "" && p.RateKey == "" && p.WorkflowID == "" &&
		len(p.ParentIDs) == 0 && p.RunOn == "" {
		// p (plain): the job has none of the fields above and never will, so the scripts read none
		// of them (each field a hash lacks costs a scan of the whole hash to find absent).
		add("p", "1")
	}
	return f
}

// plainFields appends to f the fields in which plain jobs differ (args, meta, priority, maximum
// attempts, tags, retry policy, timeout); scriptInsertOne writes the others itself. JSON values go
// as the caller's bytes, not copied into strings.
func plainFields(f []any, p *store.InsertParams) []any {
	if p.Args != nil {
		f = append(f, "args", []byte(p.Args))
	}
	if p.Meta != nil {
		f = append(f, "meta", []byte(p.Meta))
	}
	f = append(f, "prio", strconv.Itoa(p.Priority), "max", strconv.Itoa(p.MaxAttempts))
	if p.Tags != nil {
		b, _ := json.Marshal(p.Tags)
		f = append(f, "tags", b)
	}
	if p.RetryPolicy != nil {
		f = append(f, "rp", []byte(p.RetryPolicy))
	}
	if p.Timeout != 0 {
		f = append(f, "timeout", strconv.FormatInt(int64(p.Timeout), 10))
	}
	return f
}

func joinStates(sts []store.State) string {
	parts := make([]string, len(sts))
	for i, s := range sts {
		parts[i] = string(s)
	}
	return strings.Join(parts, ",")
}

// newJobFromParams is the job Insert returns: p as written, created (and due, when p has no due
// time) at the server's now.
func newJobFromParams(p *store.InsertParams, now time.Time) *store.Job {
	j := &store.Job{
		ID: p.ID, Kind: p.Kind, Queue: p.Queue, Args: clone(p.Args), Meta: clone(p.Meta),
		Priority: p.Priority, State: p.State, MaxAttempts: p.MaxAttempts, RetryPolicy: clone(p.RetryPolicy),
		Timeout: p.Timeout, CreatedAt: now, ScheduledAt: p.ScheduledAt, ExpiresAt: p.ExpiresAt,
		UniqueKey: p.UniqueKey, Tenant: p.Tenant, RateKey: p.RateKey, WorkflowID: p.WorkflowID,
		RunOn: p.RunOn,
	}
	if p.Tags != nil {
		j.Tags = append([]string(nil), p.Tags...)
	}
	if len(p.ParentIDs) > 0 {
		j.ParentIDs = append([]string(nil), p.ParentIDs...)
	}
	if j.ScheduledAt.IsZero() {
		j.ScheduledAt = now
	}
	if p.UniqueKey != "" {
		j.UniqueStates = append([]store.State(nil), store.UniqueStatesOrDefault(p.UniqueStates)...)
		j.UniqueUntil = p.UniqueUntil
	}
	// Times as stored: microsecond precision.
	j.ScheduledAt = j.ScheduledAt.Truncate(time.Microsecond)
	j.ExpiresAt = j.ExpiresAt.Truncate(time.Microsecond)
	j.UniqueUntil = j.UniqueUntil.Truncate(time.Microsecond)
	return j
}

func clone(b json.RawMessage) json.RawMessage {
	if b == nil {
		return nil
	}
	return append(json.RawMessage(nil), b...)
}

// flatToMap turns an HGETALL reply a script returned (a flat field, value list) into a map.
func flatToMap(v any) (map[string]string, error) {
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("redis: unexpected job reply %T", v)
	}
	m := make(map[string]string, len(arr)/2)
	for i := 0; i+1 < len(arr); i += 2 {
		k, _ := arr[i].(string)
		val, _ := arr[i+1].(string)
		m[k] = val
	}
	return m, nil
}

// decodeJob builds a job from its hash. A hash without an id (a job deleted meanwhile) gives nil.
func decodeJob(m map[string]string) (*store.Job, error) {
	var d jobDecoder
	for k, v := range m {
		d.set(k, v)
	}
	return d.job()
}

// jobDecoder builds a job from its hash's fields given one at a time, in any order, so that a
// script's flat reply and a handed job are decoded without building a map first.
type jobDecoder struct {
	j                                         store.Job
	token, ustates, tags, parents, errs, rkey string
}

// set takes one field of the hash; unknown fields are ignored.
func (d *jobDecoder) set(k, v string) {
	j := &d.j
	raw := func() json.RawMessage {
		if v == "" {
			return nil
		}
		return json.RawMessage(v)
	}
	atoi := func() int { n, _ := strconv.Atoi(v); return n }
	switch k {
	case "id":
		j.ID = v
	case "kind":
		j.Kind = v
	case "queue":
		j.Queue = v
	case "state":
		j.State = store.State(v)
	case "worker":
		j.WorkerID = v
	case "ukey":
		j.UniqueKey = v
	case "tenant":
		j.Tenant = v
	case "rkey", "rkeyc":
		d.rkey += v
	case "wf":
		j.WorkflowID = v
	case "runon":
		j.RunOn = store.RunOn(v)
	case "args":
		j.Args = raw()
	case "meta":
		j.Meta = raw()
	case "result":
		j.Result = raw()
	case "rp":
		j.RetryPolicy = raw()
	case "presults":
		j.ParentResults = raw()
	case "prio":
		j.Priority = atoi()
	case "attempt":
		j.Attempt = atoi()
	case "max":
		j.MaxAttempts = atoi()
	case "timeout":
		n, _ := strconv.ParseInt(v, 10, 64)
		j.Timeout = time.Duration(n)
	case "created":
		j.CreatedAt = fromMicros(v)
	case "sched":
		j.ScheduledAt = fromMicros(v)
	case "started":
		j.StartedAt = fromMicros(v)
	case "completed":
		j.CompletedAt = fromMicros(v)
	case "expires":
		j.ExpiresAt = fromMicros(v)
	case "lease":
		j.LeaseExpiresAt = fromMicros(v)
	case "uuntil":
		j.UniqueUntil = fromMicros(v)
	case "token":
		d.token = v
	case "ustates":
		d.ustates = v
	case "tags":
		d.tags = v
	case "parents":
		d.parents = v
	case "errors":
		d.errs = v
	}
}

// job returns the job the fields set describe; nil when they hold no id.
func (d *jobDecoder) job() (*store.Job, error) {
	if d.j.ID == "" {
		return nil, nil
	}
	j := new(store.Job)
	*j = d.j
	j.RateKey = d.rkey
	if j.State == store.StateActive {
		j.ClaimToken = d.token
	}
	if d.ustates != "" {
		for _, s := range strings.Split(d.ustates, ",") {
			j.UniqueStates = append(j.UniqueStates, store.State(s))
		}
	}
	if d.tags != "" {
		if err := json.Unmarshal([]byte(d.tags), &j.Tags); err != nil {
			return nil, fmt.Errorf("redis: job %s: tags: %w", j.ID, err)
		}
	}
	if d.parents != "" {
		if err := json.Unmarshal([]byte(d.parents), &j.ParentIDs); err != nil {
			return nil, fmt.Errorf("redis: job %s: parents: %w", j.ID, err)
		}
	}
	if d.errs != "" {
		if err := json.Unmarshal([]byte(d.errs), &j.Errors); err != nil {
			return nil, fmt.Errorf("redis: job %s: errors: %w", j.ID, err)
		}
	}
	return j, nil
}

// decodeFlat decodes a job from a script's HGETALL reply.
func decodeFlat(v any) (*store.Job, error) {
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("redis: unexpected job reply %T", v)
	}
	var d jobDecoder
	for i := 0; i+1 < len(arr); i += 2 {
		k, _ := arr[i].(string)
		val, _ := arr[i+1].(string)
		d.set(k, val)
	}
	return d.job()
}
