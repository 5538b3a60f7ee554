package pronto

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// Priority bounds: OJS requires at least -100 to 100; pronto accepts exactly that range.
const (
	PriorityMin = -100
	PriorityMax = 100
)

// DefaultQueue is where jobs go when no queue is named.
const DefaultQueue = "default"

// InsertOpts are the per-job options of an insert. Zero fields take the kind's defaults (from
// JobArgsWithInsertOpts), then the client's.
type InsertOpts struct {
	// ID lets the caller choose the job's id (a lowercase UUIDv7); empty: one is generated.
	ID string
	// Queue defaults to "default". OJS queue names: [a-z0-9][a-z0-9.-]*, at most 128 characters.
	Queue string
	// Priority: higher runs first, from PriorityMin to PriorityMax; 0 by default.
	Priority int
	// ScheduledAt makes the job wait until then (at most LatestTime), an absolute time stored as
	// given. Setting both it and Delay is an error.
	ScheduledAt time.Time
	// Delay makes the job wait that long from now by the store's clock (PostgreSQL now(), Redis
	// TIME), which judges when it is due: a process whose own clock is off by more than 1 s still
	// schedules it Delay from the store's now. The client keeps the offset between the two clocks,
	// read at most once a minute and only for inserts with a Delay (docs/architecture.md, "Clocks").
	Delay time.Duration
	// MaxAttempts overrides the retry policy's attempts (1: no retry).
	MaxAttempts int
	// RetryPolicy overrides the client's default policy for this job.
	RetryPolicy *RetryPolicy
	// Timeout bounds each attempt: the worker's context is cancelled when it passes and the attempt
	// fails. Zero: the client's JobTimeout. It is kept in whole milliseconds (a fraction rounds up).
	Timeout time.Duration
	// ExpiresAt: a job not started by then is discarded instead of run (at most LatestTime).
	ExpiresAt time.Time
	// Tags are free labels for searching and dashboards: JobList (JobListParams.Tags), 'pronto jobs
	// list --tag' and the HTTP bulk filter list the jobs that have every given tag.
	Tags []string
	// Meta is stored as the job's OJS meta object (tracing ids, tenant, anything JSON).
	Meta map[string]any
	// Pending inserts the job in the pending state: it waits for JobActivate.
	Pending bool
	// Unique makes the job unique (see UniqueOpts); nil: no uniqueness.
	Unique *UniqueOpts
	// RateKey subjects the job to the rate and concurrency limit stored under that key (see
	// Client.RateLimitSet); a key with no stored limit limits nothing. Keys match
	// [a-zA-Z0-9][a-zA-Z0-9._:-]*, at most 255 characters.
	RateKey string
	// RateLimit, with RateKey, stores the key's limit in the same transaction as the insert (the last
	// insert or RateLimitSet wins).
	RateLimit *RateLimit
	// Tenant names the job's tenant (OJS multi-tenancy; over HTTP meta.tenant_id or the X-OJS-Tenant
	// header): stored with the job and returned in JobRow.Tenant, 1 to 255 printable ASCII
	// characters without spaces. It is the job's fairness key: within a queue, claims take jobs in
	// turns across the tenants with waiting jobs (docs/fair-scheduling.md).
	Tenant string
}

// The rules for names, as error messages state them. One rule holds everywhere: in Go, on the command
// line and over HTTP.
const (
	// KindRule is the rule ValidKind checks (for job kinds, which OJS calls types).
	KindRule = "dot-separated segments of [a-z][a-z0-9_-]* (at most 255 characters), such as email.send"
	// QueueNameRule is the rule ValidQueueName checks.
	QueueNameRule = "[a-z0-9][a-z0-9.-]* (at most 128 characters), such as email or batch-2"
)

// DefaultMaxMetaBytes bounds a job's meta serialized as compact JSON: 64 KiB, the limit of
// ojs-payload-limits.md §4.3 and ojs-security.md §8.3. Meta is indexed, logged and shown in
// dashboards, so it is kept small; large data belongs in args.
const DefaultMaxMetaBytes = 64 << 10

// MetaKeyRule is the rule ValidMetaKey checks (ojs-security.md §8.3).
const MetaKeyRule = "[a-zA-Z0-9_.-], 1 to 128 characters"

// ValidMetaKey reports whether key is an acceptable meta key: 1 to 128 letters, digits, underscores,
// dots and dashes. Meta keys end up in headers and log fields downstream, so nothing else is let in.
func ValidMetaKey(key string) bool {
	if key == "" || len(key) > 128 {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// MetaTooLargeError is the error of a job whose meta, serialized as compact JSON, is over the limit.
// errors.Is(err, ErrInvalidArgs) holds for it.
type MetaTooLargeError struct {
	// Size is the meta's size in bytes; Limit the largest accepted.
	Size, Limit int
}

func (e *MetaTooLargeError) Error() string {
	return fmt.Sprintf("%v: meta is %d bytes, over the limit of %d", ErrInvalidArgs, e.Size, e.Limit)
}

// Unwrap makes the error an ErrInvalidArgs, as every refused insert is.
func (e *MetaTooLargeError) Unwrap() error { return ErrInvalidArgs }

// CheckMetaSize returns a *MetaTooLargeError when meta, a JSON value, is over limit bytes once
// compacted (limit <= 0: DefaultMaxMetaBytes). White space a sender added does not count against it.
func CheckMetaSize(meta []byte, limit int) error {
	if limit <= 0 {
		limit = DefaultMaxMetaBytes
	}
	if len(meta) <= limit {
		return nil // compacting never grows it
	}
	size := len(meta)
	var b bytes.Buffer
	if json.Compact(&b, meta) == nil {
		size = b.Len()
	}
	if size <= limit {
		return nil
	}
	return &MetaTooLargeError{Size: size, Limit: limit}
}

// ValidQueueName reports whether name is an acceptable OJS queue name: [a-z0-9][a-z0-9.-]*, at most
// 128 characters.
func ValidQueueName(name string) bool { return len(name) <= 128 && validName(name, false) }

// ValidTenant reports whether tenant is an acceptable tenant id: 1 to 255 printable ASCII characters,
// no spaces.
func ValidTenant(tenant string) bool {
	if tenant == "" || len(tenant) > 255 {
		return false
	}
	for i := 0; i < len(tenant); i++ {
		if tenant[i] < 0x21 || tenant[i] > 0x7e {
			return false
		}
	}
	return true
}

// ValidRateKey reports whether key is an acceptable rate-limit key: [a-zA-Z0-9][a-zA-Z0-9._:-]*, at
// most 255 characters.
func ValidRateKey(key string) bool { return len(key) <= 255 && validName(key, true) }

// validName reports whether s is a lower-case letter or digit followed by lower-case letters, digits,
// dots and dashes; keys also allows upper-case letters, underscores and colons. Every insert checks
// its queue name, so this is a loop over bytes rather than a regular expression.
func validName(s string, keys bool) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case keys && 'A' <= c && c <= 'Z':
		case i > 0 && (c == '.' || c == '-'):
		case i > 0 && keys && (c == '_' || c == ':'):
		default:
			return false
		}
	}
	return true
}

// ValidKind reports whether kind is an acceptable job kind (OJS job type): dot-separated segments of
// [a-z][a-z0-9_-]*, at most 255 characters ("email.send", "dlq.manual-retry"). Go workers, the CLI
// and the OJS HTTP API accept the same kinds.
func ValidKind(kind string) bool { return validType(kind, true) }

// validType reports whether typ is dot-separated segments that start with a lower-case letter and go
// on with lower-case letters, digits and underscores (and hyphens when hyphens), at most 255 bytes.
func validType(typ string, hyphens bool) bool {
	if typ == "" || len(typ) > 255 {
		return false
	}
	segmentStart := true
	for i := 0; i < len(typ); i++ {
		c := typ[i]
		switch {
		case 'a' <= c && c <= 'z':
		case segmentStart:
			return false
		case '0' <= c && c <= '9', c == '_', hyphens && c == '-':
		case c == '.':
			segmentStart = true
			continue
		default:
			return false
		}
		segmentStart = false
	}
	return !segmentStart
}

// merge returns o with its zero fields taken from def.
func (o InsertOpts) merge(def InsertOpts) InsertOpts {
	if o.ID == "" {
		o.ID = def.ID
	}
	if o.Queue == "" {
		o.Queue = def.Queue
	}
	if o.Priority == 0 {
		o.Priority = def.Priority
	}
	if o.ScheduledAt.IsZero() && o.Delay == 0 {
		o.ScheduledAt, o.Delay = def.ScheduledAt, def.Delay
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = def.MaxAttempts
	}
	if o.RetryPolicy == nil {
		o.RetryPolicy = def.RetryPolicy
	}
	if o.Timeout == 0 {
		o.Timeout = def.Timeout
	}
	if o.ExpiresAt.IsZero() {
		o.ExpiresAt = def.ExpiresAt
	}
	if o.Tags == nil {
		o.Tags = def.Tags
	}
	if o.Meta == nil {
		o.Meta = def.Meta
	}
	o.Pending = o.Pending || def.Pending
	if o.Unique == nil {
		o.Unique = def.Unique
	}
	// The kind's default limit belongs to its default key: a caller naming another key follows
	// the limit stored under that one, and must not overwrite it with a limit meant for the default.
	if o.RateKey == "" || o.RateKey == def.RateKey {
		o.RateKey = def.RateKey
		if o.RateLimit == nil {
			o.RateLimit = def.RateLimit
		}
	}
	if o.Tenant == "" {
		o.Tenant = def.Tenant
	}
	return o
}
