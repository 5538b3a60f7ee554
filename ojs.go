package pronto

import (
	"context"
	"encoding/json"

	"github.com/pronto-jobs/pronto/store"
)

// ValidOJSType reports whether typ is an acceptable job type for jobs given in OJS terms (InsertOJS,
// cron registrations): dot-separated segments that start with a lowercase letter and go on with
// lowercase letters, digits, underscores and hyphens ("dlq.test.manual-retry"), at most 255 bytes.
// It is ValidKind's grammar plus the hyphen, which the OJS conformance cases use although the OJS
// core prose leaves it out.
func ValidOJSType(typ string) bool { return validType(typ, true) }

// OJSJob is a job given in OJS terms: its type, its args as a JSON array and its meta as a JSON
// object, kept byte for byte (no decoding and re-encoding on the way to the store).
type OJSJob struct {
	Kind string
	// Args must be a JSON array.
	Args json.RawMessage
	// Meta is a JSON object, or nil for none. When it is set, Opts.Meta must be nil.
	Meta json.RawMessage
	Opts InsertOpts
}

// InsertOJS stores jobs given in OJS terms atomically, with the validation, middleware and
// notifications of InsertRaw, but accepts every job type ValidOJSType accepts, hyphens included, and
// takes meta as raw JSON. The OJS HTTP API inserts through it. (A Go worker can be registered only
// for kinds ValidKind accepts; jobs of a hyphenated type are worked by OJS workers.)
func (c *Client) InsertOJS(ctx context.Context, jobs []OJSJob) ([]*JobRow, error) {
	ps, err := resolveAll(jobs, c.resolveOJS)
	if err != nil {
		return nil, err
	}
	return c.insert(ctx, ps, c.store.Insert)
}

// resolveOJS validates one job given in OJS terms.
func (c *Client) resolveOJS(j OJSJob) (*store.InsertParams, error) {
	if !ValidOJSType(j.Kind) {
		return nil, invalidf("type %q: must be dot-separated segments of [a-z][a-z0-9_-]* (for example \"email.send\")", j.Kind)
	}
	if !jsonStartsWith(j.Args, '[') || !json.Valid(j.Args) {
		return nil, invalidf("type %q: args must be a JSON array", j.Kind)
	}
	meta := j.Meta
	if len(meta) > 0 && string(meta) != "null" {
		if j.Opts.Meta != nil {
			return nil, invalidf("type %q: give meta as raw JSON or in the options, not both", j.Kind)
		}
		if !jsonStartsWith(meta, '{') || !json.Valid(meta) {
			return nil, invalidf("type %q: meta must be a JSON object", j.Kind)
		}
	} else {
		meta = nil
	}
	return c.resolve(j.Kind, j.Args, meta, j.Opts)
}

// jsonStartsWith reports whether the first non-space byte of b is c.
func jsonStartsWith(b []byte, c byte) bool {
	for _, x := range b {
		switch x {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return x == c
	}
	return false
}
