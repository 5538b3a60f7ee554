package pronto

import (
	"context"
	"encoding/json"

	"github.com/pronto-jobs/pronto/store"
)

// ValidOJSType reports whether typ is an acceptable job type for jobs given in OJS terms. It is
// ValidKind: kinds and OJS types follow one rule (dot-separated segments of [a-z][a-z0-9_-]*; the
// hyphen is in it because the OJS conformance cases use it, although the OJS core prose leaves it
// out).
func ValidOJSType(typ string) bool { return ValidKind(typ) }

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
// notifications of InsertRaw, but takes meta as raw JSON. The OJS HTTP API inserts through it.
func (c *Client) InsertOJS(ctx context.Context, jobs []OJSJob) ([]*JobRow, error) {
	ps, err := resolveAll(jobs, func(j OJSJob) (*store.InsertParams, error) { return c.resolveOJSContext(ctx, j) })
	if err != nil {
		return nil, err
	}
	return c.insert(ctx, ps, c.storeInsert)
}

// resolveOJS validates one job given in OJS terms, for callers whose jobs have no Delay (cron
// refuses one, a retry keeps its own schedule), so that it never reads the store's clock.
func (c *Client) resolveOJS(j OJSJob) (*store.InsertParams, error) {
	return c.resolveOJSContext(context.Background(), j)
}

// resolveOJSContext validates one job given in OJS terms; ctx bounds a read of the store's clock for
// a Delay (see resolve).
func (c *Client) resolveOJSContext(ctx context.Context, j OJSJob) (*store.InsertParams, error) {
	if !ValidOJSType(j.Kind) {
		return nil, invalidf("type %q: must be %s", j.Kind, KindRule)
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
	return c.resolve(ctx, j.Kind, j.Args, meta, j.Opts)
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
