package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/isodur"
)

// tenantJSON is the JSON form of a tenant printed by 'tenants list --json' and 'tenants get --json'.
type tenantJSON struct {
	Tenant    string           `json:"tenant"`
	Weight    int              `json:"weight"`
	WeightSet bool             `json:"weight_set"`
	MaxActive int              `json:"max_active,omitempty"`
	Rate      int              `json:"rate,omitempty"`
	Period    string           `json:"period,omitempty"` // ISO 8601, as every duration in the JSON output
	Counts    map[string]int64 `json:"counts"`
	// Enqueue-time limits (pronto.TenantEnqueueLimits).
	MaxQueueDepth int64  `json:"max_queue_depth,omitempty"`
	MaxScheduled  int64  `json:"max_scheduled,omitempty"`
	EnqueueRate   int64  `json:"enqueue_rate,omitempty"`
	EnqueuePeriod string `json:"enqueue_period,omitempty"`
	// PriorityBoost is added to the priority of the tenant's jobs as they are inserted.
	PriorityBoost int `json:"priority_boost,omitempty"`
	// Throttle is the automatic throttle in force (pronto serve --tenant-throttle), if any.
	Throttle *pronto.TenantThrottle `json:"throttle,omitempty"`
}

// invalidTenant is the usage error for a TENANT argument no tenant can have: looked up, it would
// only be "not found".
func invalidTenant(cmd, tenant string) error {
	return usageErrorf("%s: invalid tenant %q: 1 to 255 printable ASCII characters without spaces", cmd, tenant)
}

func tenantToJSON(t *pronto.TenantInfo) tenantJSON {
	out := tenantJSON{Tenant: t.Tenant, Weight: t.Weight, WeightSet: t.WeightSet, Counts: map[string]int64{}, PriorityBoost: t.PriorityBoost,
		Throttle: t.Throttle}
	for st, n := range t.Counts {
		out.Counts[string(st)] = n
	}
	if t.Limit != nil {
		out.MaxActive, out.Rate = t.Limit.Limit.MaxActive, t.Limit.Limit.Rate
		if t.Limit.Limit.Period > 0 {
			out.Period = isodur.Format(t.Limit.Limit.Period)
		}
	}
	if el := t.EnqueueLimits; el != nil {
		out.MaxQueueDepth, out.MaxScheduled, out.EnqueueRate = el.MaxQueueDepth, el.MaxScheduled, el.EnqueueRate
		if el.EnqueuePeriod > 0 {
			out.EnqueuePeriod = isodur.Format(el.EnqueuePeriod)
		}
	}
	return out
}

// printTenants prints tenants as a table.
func printTenants(r *runner, ts []*pronto.TenantInfo) error {
	tw := tabwriter.NewWriter(r.env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tWEIGHT\tBOOST\tMAX ACTIVE\tRATE\tAVAILABLE\tACTIVE\tSCHEDULED\tRETRYABLE\tCOMPLETED\tDISCARDED")
	for _, t := range ts {
		weight := fmt.Sprint(t.Weight)
		if !t.WeightSet {
			weight += " (default)"
		}
		if th := t.Throttle; th != nil {
			weight += fmt.Sprintf(" (throttled: %s until %s)", th.Action, th.Until.UTC().Format(time.RFC3339))
		}
		maxActive, rate := "-", "-"
		if t.Limit != nil && t.Limit.Limit.MaxActive > 0 {
			maxActive = fmt.Sprint(t.Limit.Limit.MaxActive)
		}
		if t.Limit != nil && t.Limit.Limit.Rate > 0 {
			rate = fmt.Sprintf("%d/%s", t.Limit.Limit.Rate, t.Limit.Limit.Period)
		}
		boost := "-"
		if t.PriorityBoost != 0 {
			boost = fmt.Sprintf("%+d", t.PriorityBoost)
		}
		c := t.Counts
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", t.Tenant, weight, boost, maxActive, rate,
			c[pronto.StateAvailable], c[pronto.StateActive], c[pronto.StateScheduled], c[pronto.StateRetryable],
			c[pronto.StateCompleted], c[pronto.StateDiscarded])
	}
	return tw.Flush()
}

func cmdTenantsList(ctx context.Context, r *runner, args []string) error {
	return listCommand[*pronto.TenantInfo, tenantJSON]{
		synopsis: "pronto tenants list [flags]",
		about: "List every tenant with jobs, a weight or a limit: its weight (turns per round of a queue's\n" +
			"rotation), its limit, and its jobs per state across queues.",
		key: "tenants", empty: "no tenants",
		list: (*pronto.Client).TenantList, toJSON: tenantToJSON, table: printTenants,
	}.run(ctx, r, args)
}

func cmdTenantsGet(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto tenants get TENANT [flags]", "Show one tenant: its weight, its limits (enqueue limits included) and its jobs per state.").withDatabase()
	asJSON := fs.Bool("json", false, "print the tenant as JSON")
	pos, err := fs.parse(args, 1, 1)
	if err != nil {
		return err
	}
	if !pronto.ValidTenant(pos[0]) {
		return invalidTenant("tenants get", pos[0])
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
	if err := printTenants(r, []*pronto.TenantInfo{t}); err != nil {
		return err
	}
	// The enqueue limits, which the list's table has no room for.
	if el := t.EnqueueLimits; el != nil && (el.MaxQueueDepth > 0 || el.MaxScheduled > 0 || el.EnqueueRate > 0) {
		var parts []string
		if el.MaxQueueDepth > 0 {
			parts = append(parts, fmt.Sprintf("max queue depth %d", el.MaxQueueDepth))
		}
		if el.MaxScheduled > 0 {
			parts = append(parts, fmt.Sprintf("max scheduled %d", el.MaxScheduled))
		}
		if el.EnqueueRate > 0 {
			parts = append(parts, fmt.Sprintf("enqueue rate %d/%s", el.EnqueueRate, el.EnqueuePeriod))
		}
		fmt.Fprintf(r.env.Stdout, "enqueue limits: %s\n", strings.Join(parts, ", "))
	} else {
		fmt.Fprintln(r.env.Stdout, "enqueue limits: none")
	}
	return nil
}

func cmdTenantsSet(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto tenants set TENANT [flags]",
		"Set a tenant's weight (its jobs per turn of a queue's rotation across tenants) and its limit (at\n"+
			"most --max-active of its jobs running at once across queues, at most --rate started per\n"+
			"--period): claims pass over a tenant at its limit and its jobs wait. Its enqueue limits\n"+
			"(--max-queue-depth, --max-scheduled, --enqueue-rate with --enqueue-period) refuse inserts beyond\n"+
			"them; given, they replace the tenant's enqueue limits. --priority-boost N adds N to the priority\n"+
			"of the tenant's jobs inserted from then on (clamped to -100..100; jobs already stored keep\n"+
			"theirs; 0 removes it). Flags not given are left as they are; --no-limit removes the limit,\n"+
			"--no-enqueue-limits the enqueue limits.").withDatabase()
	weight := fs.Int("weight", 0, fmt.Sprintf("`N` jobs per turn, 1 to %d", pronto.MaxTenantWeight))
	maxActive := fs.Int("max-active", 0, "at most `N` of the tenant's jobs running at once (0: no bound)")
	rate := fs.Int("rate", 0, "at most `N` of the tenant's jobs started per --period (0: no bound)")
	period := fs.duration("period", 0, "the rate's window, a `DURATION` such as 1s or 1m")
	noLimit := fs.Bool("no-limit", false, "remove the tenant's limit")
	maxDepth := fs.Int64("max-queue-depth", 0, "refuse inserts beyond `N` waiting jobs of the tenant across queues (0: no bound)")
	maxScheduled := fs.Int64("max-scheduled", 0, "refuse inserts beyond `N` scheduled jobs of the tenant (0: no bound)")
	enqRate := fs.Int64("enqueue-rate", 0, "refuse inserts beyond `N` per --enqueue-period, counted by each client (0: no bound)")
	enqPeriod := fs.duration("enqueue-period", 0, "the enqueue rate's window, a `DURATION` such as 1m")
	noEnqueue := fs.Bool("no-enqueue-limits", false, "remove the tenant's enqueue limits")
	boostFlag := fs.String("priority-boost", "", fmt.Sprintf("add `N` to the priority of the tenant's new jobs, -%d to %d (0: remove the boost)",
		pronto.MaxTenantPriorityBoost, pronto.MaxTenantPriorityBoost))
	pos, err := fs.parse(args, 1, 1)
	if err != nil {
		return err
	}
	tenant := pos[0]
	setBoost := *boostFlag != ""
	boost, boostErr := strconv.Atoi(*boostFlag)
	setLimit := *maxActive != 0 || *rate != 0 || *period != 0
	setEnqueue := *maxDepth != 0 || *maxScheduled != 0 || *enqRate != 0 || *enqPeriod != 0
	switch {
	case *maxDepth < 0 || *maxScheduled < 0 || *enqRate < 0 || *enqPeriod < 0:
		return usageErrorf("tenants set: --max-queue-depth, --max-scheduled, --enqueue-rate and --enqueue-period must not be negative")
	case *enqRate > 0 && *enqPeriod == 0 && fs.given("enqueue-period"):
		return usageErrorf("tenants set: --enqueue-period %s: the enqueue rate's window must be positive, for example 1m", *enqPeriod)
	case (*enqRate > 0) != (*enqPeriod > 0):
		return usageErrorf("tenants set: --enqueue-rate and --enqueue-period go together: give both (for example --enqueue-rate 1000 --enqueue-period 1m) or neither")
	case setEnqueue && *noEnqueue:
		return usageErrorf("tenants set: --no-enqueue-limits and an enqueue limit contradict each other")
	case !pronto.ValidTenant(tenant):
		return invalidTenant("tenants set", tenant)
	case fs.given("weight") && (*weight < 1 || *weight > pronto.MaxTenantWeight):
		return usageErrorf("tenants set: --weight %d: must be 1 to %d", *weight, pronto.MaxTenantWeight)
	case *maxActive < 0 || *rate < 0 || *period < 0:
		return usageErrorf("tenants set: --max-active, --rate and --period must not be negative")
	case *rate > 0 && *period == 0 && fs.given("period"):
		return usageErrorf("tenants set: --period %s: the rate's window must be positive, for example 1s or 1m", *period)
	case (*rate > 0) != (*period > 0):
		return usageErrorf("tenants set: --rate and --period go together: give both (for example --rate 10 --period 1s) or neither")
	case setLimit && *noLimit:
		return usageErrorf("tenants set: --no-limit and a limit (--max-active, --rate) contradict each other")
	case setBoost && (boostErr != nil || boost < -pronto.MaxTenantPriorityBoost || boost > pronto.MaxTenantPriorityBoost):
		return usageErrorf("tenants set: --priority-boost %q: must be an integer from -%d to %d", *boostFlag, pronto.MaxTenantPriorityBoost, pronto.MaxTenantPriorityBoost)
	case *weight == 0 && !setLimit && !*noLimit && !setEnqueue && !*noEnqueue && !setBoost:
		return usageErrorf("tenants set: nothing to set: give --weight, --priority-boost, --max-active, --rate with --period, an enqueue limit, --no-limit or --no-enqueue-limits")
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
	if setBoost {
		if boost != 0 {
			if err := c.TenantSetPriorityBoost(ctx, tenant, boost); err != nil {
				return fail(err)
			}
			did = append(did, fmt.Sprintf("priority boost %+d", boost))
		} else {
			if err := c.TenantDeletePriorityBoost(ctx, tenant); err != nil && !errors.Is(err, pronto.ErrNotFound) {
				return fail(err)
			}
			did = append(did, "no priority boost")
		}
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
	if setEnqueue || *noEnqueue {
		el := pronto.TenantEnqueueLimits{MaxQueueDepth: *maxDepth, MaxScheduled: *maxScheduled, EnqueueRate: *enqRate, EnqueuePeriod: *enqPeriod}
		if err := c.TenantSetEnqueueLimits(ctx, tenant, el); err != nil {
			return fail(err)
		}
		if setEnqueue {
			did = append(did, "enqueue limits stored")
		} else {
			did = append(did, "no enqueue limits")
		}
	}
	fmt.Fprintf(r.env.Stdout, "tenant %s: %s\n", tenant, strings.Join(did, ", "))
	return nil
}

func cmdTenantsDelete(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto tenants delete TENANT [flags]",
		"Forget a tenant's weight, limit, enqueue limits and priority boost (its jobs stay, with their\n"+
			"priorities; it weighs 1, is unlimited and unboosted again).").withDatabase()
	pos, err := fs.parse(args, 1, 1)
	if err != nil {
		return err
	}
	if !pronto.ValidTenant(pos[0]) {
		return invalidTenant("tenants delete", pos[0])
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
		func() error { return c.TenantDeletePriorityBoost(ctx, pos[0]) },
		func() error { return deleteEnqueueLimits(ctx, c, pos[0]) },
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
		return notFoundf("tenant %q has no weight or limit stored, nor enqueue limits or a priority boost", pos[0])
	}
	fmt.Fprintf(r.env.Stdout, "tenant %s: weight, limits and priority boost forgotten\n", pos[0])
	return nil
}

// deleteEnqueueLimits removes tenant's enqueue limits, or reports pronto.ErrNotFound when it has none.
func deleteEnqueueLimits(ctx context.Context, c *pronto.Client, tenant string) error {
	m, err := c.TenantEnqueueLimits(ctx)
	if err != nil {
		return err
	}
	if _, ok := m[tenant]; !ok {
		return pronto.ErrNotFound
	}
	return c.TenantSetEnqueueLimits(ctx, tenant, pronto.TenantEnqueueLimits{})
}
