// Package metatenant holds the one rule that keeps a job's meta.tenant_id and its stored tenant the
// same when a retry overrides the meta, shared by the Go API (JobRetryWith) and the OJS server (its
// dead-letter and admin retries), which words its refusal for HTTP.
package metatenant

import "encoding/json"

// Mismatch reports whether meta, a JSON object, names a tenant_id other than tenant (null or absent
// matching no tenant), and returns the tenant_id member as sent. A meta that is not an object is
// not this rule's to refuse: it reports no mismatch. The meta is decoded, so that an escaped key is
// the same key.
func Mismatch(meta json.RawMessage, tenant string) (json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if meta == nil || json.Unmarshal(meta, &m) != nil {
		return nil, false
	}
	raw, ok := m["tenant_id"]
	if !ok {
		return nil, false
	}
	var got *string
	if json.Unmarshal(raw, &got) == nil && (got == nil && tenant == "" || got != nil && *got == tenant) {
		return nil, false
	}
	return raw, true
}
