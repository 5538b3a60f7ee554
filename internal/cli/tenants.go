package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/pronto-jobs/pronto"
)

// tenantJSON is the JSON form of a tenant printed by 'tenants list --json' and 'tenants get --json'.
type tenantJSON struct {
	Tenant    string           `json:"tenant"`
	Weight    int              `json:"weight"`
	WeightSet bool             `json:"weight_set"`
	MaxActive int              `json:"max_active,omitempty"`
	Rate      int              `json:"rate,omitempty"`
	Period    string           `json:"period,omitempty"`
	Counts    map[string]int64 `json:"counts"`
}

func tenantToJSON(t *pronto.TenantInfo) tenantJSON {
	out := tenantJSON{Tenant: t.Tenant, Weight: t.Weight, WeightSet: t.WeightSet, Counts: map[string]int64{}}
	for st, n := range t.Counts {
		out.Counts[string(st)] = n
	}
	if t.Limit != nil {
		out.MaxActive, out.Rate = t.Limit.Limit.MaxActive, t.Limit.Limit.Rate
		if t.Limit.Limit.Period > 0 {
			out.Period = t.Limit.Limit.Period.String()
		}
	}
	return out
}

// printTenants prints tenants as a table.
func printTenants(r *runner, ts []*pronto.TenantInfo) error {
	tw := tabwriter.NewWriter(r.env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tWEIGHT\tMAX ACTIVE\tRATE\tAVAILABLE\tACTIVE\tSCHEDULED\tRETRYABLE\tCOMPLETED\tDISCARDED")
	for _, t := range ts {
		weight := fmt.Sprint(t.Weight)
		if !t.WeightSet {
			weight += " (default)"
		}
		maxActive, rate := "-", "-"
		if t.Limit != nil && t.Limit.Limit.MaxActive > 0 {
			maxActive = fmt.Sprint(t.Limit.Limit.MaxActive)
		}
		if t.Limit != nil && t.Limit.Limit.Rate > 0 {
			rate = fmt.Sprintf("%d/%s", t.Limit.Limit.Rate, t.Limit.Limit.Period)
		}
		c := t.Counts
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", t.Tenant, weight, maxActive, rate,
			c[pronto.StateAvailable], c[pronto.StateActive], c[pronto.StateScheduled], c[pronto.StateRetryable],
			c[pronto.StateCompleted], c[pronto.StateDiscarded])
	}
	return tw.Flush()
}

func cmdTenantsList(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto tenants list [flags]",
		"List every tenant with jobs, a weight or a limit: its weight (turns per round of a queue's\n"+
			"rotation), its limit, and its jobs per state across queues.").withDatabase()
	asJSON := fs.Bool("json", false, `print {"tenants": [...], "next": ""} as JSON`)
	if _, err := fs.parse(args, 0, 0); err != nil {
		return err
	}
	c, db, err := r.adminClient(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	ts, err := c.TenantList(ctx)
	if err != nil {
		return errorf("%v", err)
	}
	if *asJSON {
		out := make([]tenantJSON, len(ts))
		for i, t := range ts {
			out[i] = tenantToJSON(t)
		}
		return writeList(r.env.Stdout, "tenants", out, "")
	}
	if len(ts) == 0 {
		fmt.Fprintln(r.env.Stderr, "no tenants")
		return nil
	}
	return printTenants(r, ts)
}

func cmdTenantsGet(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto tenants get TENANT [flags]", "Show one tenant: its weight, its limit and its jobs per state.").withDatabase()
	asJSON := fs.Bool("json", false, "print the tenant as JSON")
	pos, err := fs.parse(args, 1, 1)
	if err != nil {
		return err
	}
	c, db, err := r.adminClient(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	t, err := c.TenantGet(ctx, pos[0])
	if err != nil {
		if errors.Is(err, pronto.ErrNotFound) {
			return notFoundf("tenant %q has no jobs, weight or limit", pos[0])
		}
		return errorf("%v", err)
	}
	if *asJSON {
		return writeJSON(r.env.Stdout, tenantToJSON(t))
	}
	return printTenants(r, []*pronto.TenantInfo{t})
}

func cmdTenantsSet(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto tenants set TENANT [flags]",
		"Set a tenant's weight (its jobs per turn of a queue's rotation across tenants) and its limit (at\n"+
			"most --max-active of its jobs running at once across queues, at most --rate started per\n"+
			"--period): claims pass over a tenant at its limit and its jobs wait. Flags not given are left\n"+
			"as they are; --no-limit removes the limit.").withDatabase()
	weight := fs.Int("weight", 0, fmt.Sprintf("`N` jobs per turn, 1 to %d", pronto.MaxTenantWeight))
	maxActive := fs.Int("max-active", 0, "at most `N` of the tenant's jobs running at once (0: no bound)")
	rate := fs.Int("rate", 0, "at most `N` of the tenant's jobs started per --period (0: no bound)")
	period := fs.duration("period", 0, "the rate's window, e.g. 1s or 1m")
	noLimit := fs.Bool("no-limit", false, "remove the tenant's limit")
	pos, err := fs.parse(args, 1, 1)
	if err != nil {
		return err
	}
	tenant := pos[0]
	setLimit := *maxActive != 0 || *rate != 0 || *period != 0
	switch {
	case !pronto.ValidTenant(tenant):
		return usageErrorf("tenants set: invalid tenant %q: 1 to 255 printable ASCII characters without spaces", tenant)
	case *weight != 0 && (*weight < 1 || *weight > pronto.MaxTenantWeight):
		return usageErrorf("tenants set: --weight %d: must be 1 to %d", *weight, pronto.MaxTenantWeight)
	case *maxActive < 0 || *rate < 0 || *period < 0:
		return usageErrorf("tenants set: --max-active, --rate and --period must not be negative")
	case (*rate > 0) != (*period > 0):
		return usageErrorf("tenants set: --rate and --period go together: give both (for example --rate 10 --period 1s) or neither")
	case setLimit && *noLimit:
		return usageErrorf("tenants set: --no-limit and a limit (--max-active, --rate) contradict each other")
	case *weight == 0 && !setLimit && !*noLimit:
		return usageErrorf("tenants set: nothing to set: give --weight, --max-active, --rate with --period, or --no-limit")
	}
	c, db, err := r.adminClient(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	fail := func(err error) error {
		if errors.Is(err, pronto.ErrInvalidArgs) {
			return usageErrorf("tenants set: %v", err)
		}
		return errorf("%v", err)
	}
	var did []string
	if *weight != 0 {
		if err := c.TenantSetWeight(ctx, tenant, *weight); err != nil {
			return fail(err)
		}
		did = append(did, fmt.Sprintf("weight %d", *weight))
	}
	if setLimit {
		if err := c.TenantSetLimit(ctx, tenant, pronto.RateLimit{MaxActive: *maxActive, Rate: *rate, Period: *period}); err != nil {
			return fail(err)
		}
		did = append(did, "limit stored")
	}
	if *noLimit {
		if err := c.TenantDeleteLimit(ctx, tenant); err != nil && !errors.Is(err, pronto.ErrNotFound) {
			return fail(err)
		}
		did = append(did, "no limit")
	}
	fmt.Fprintf(r.env.Stdout, "tenant %s: %s\n", tenant, strings.Join(did, ", "))
	return nil
}

func cmdTenantsDelete(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto tenants delete TENANT [flags]",
		"Forget a tenant's weight and limit (its jobs stay; it weighs 1 and is unlimited again).").withDatabase()
	pos, err := fs.parse(args, 1, 1)
	if err != nil {
		return err
	}
	c, db, err := r.adminClient(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	found := false
	for _, del := range []func() error{
		func() error { return c.TenantDeleteWeight(ctx, pos[0]) },
		func() error { return c.TenantDeleteLimit(ctx, pos[0]) },
	} {
		switch err := del(); {
		case err == nil:
			found = true
		case errors.Is(err, pronto.ErrNotFound), errors.Is(err, pronto.ErrInvalidArgs):
		default:
			return errorf("%v", err)
		}
	}
	if !found {
		return notFoundf("tenant %q has no weight or limit stored", pos[0])
	}
	fmt.Fprintf(r.env.Stdout, "tenant %s: weight and limit forgotten\n", pos[0])
	return nil
}
