package pronto

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/pronto-jobs/pronto/store"
)

// ojsTypeRE is the job type grammar of the OJS conformance suite: dot-separated segments that start
// with a lowercase letter and go on with lowercase letters, digits, underscores and hyphens
// ("dlq.test.manual-retry"). It is ValidKind's grammar plus the hyphen, which the suite's cases use
// although the OJS core prose leaves it out.
var ojsTypeRE = regexp.MustCompile(`^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*$`)

// ValidOJSType reports whether typ is an acceptable job type for jobs given in OJS terms (InsertOJS,
// cron registrations): ValidKind's grammar, with hyphens also allowed in segments.
func ValidOJSType(typ string) bool { return len(typ) <= 255 && ojsTypeRE.MatchString(typ) }

// InsertOJS stores jobs given in OJS terms atomically, like InsertRaw, but accepts every job type
// ValidOJSType accepts, hyphens included. The OJS HTTP API inserts through it. (A Go worker can be
// registered only for kinds ValidKind accepts; jobs of a hyphenated type are worked by OJS workers.)
func (c *Client) InsertOJS(ctx context.Context, jobs []RawJob) ([]*JobRow, error) {
	if len(jobs) == 0 {
		return nil, invalidf("no jobs to insert")
	}
	ps := make([]*store.InsertParams, len(jobs))
	for i, j := range jobs {
		p, err := c.resolveOJS(j)
		if err != nil {
			if len(jobs) > 1 {
				return nil, fmt.Errorf("job %d of %d: %w", i, len(jobs), err)
			}
			return nil, err
		}
		ps[i] = p
	}
	return c.insert(ctx, ps, c.store.Insert)
}

// resolveOJS validates one job given in OJS terms.
func (c *Client) resolveOJS(j RawJob) (*store.InsertParams, error) {
	if !ValidOJSType(j.Kind) {
		return nil, invalidf("type %q: must be dot-separated segments of [a-z][a-z0-9_-]* (for example \"email.send\")", j.Kind)
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(j.Args, &elems); err != nil || elems == nil {
		return nil, invalidf("type %q: args must be a JSON array", j.Kind)
	}
	return c.resolve(j.Kind, j.Args, j.Opts)
}
