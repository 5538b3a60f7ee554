package pronto

import (
	"context"
	"time"

	"github.com/pronto-jobs/pronto/internal/maintenance"
)

// SystemOp names a housekeeping pass a client runs (Config.SystemHook). The values are the span
// names ojs-observability.md 6.3 gives them; SystemOpCleanup is pronto's.
type SystemOp string

// The housekeeping passes.
const (
	// SystemOpSchedulerPoll: the leader made due scheduled and retryable jobs available (not while
	// maintenance mode is on) and discarded jobs past their expiry (every second).
	SystemOpSchedulerPoll SystemOp = "ojs.scheduler poll"
	// SystemOpReaperCheck: the leader returned jobs whose lease expired (their worker died or
	// stopped heartbeating) to available, or discarded them with no attempts left (every
	// RescueInterval). It is also OJS's visibility check: a lease is pronto's visibility timeout.
	SystemOpReaperCheck SystemOp = "ojs.reaper check"
	// SystemOpCleanup: the leader deleted terminal jobs past their retention (every 30 s).
	SystemOpCleanup SystemOp = "pronto.retention cleanup"
	// SystemOpCronTrigger: RunCron handled one due occurrence of a cron schedule (SystemPass.Name).
	SystemOpCronTrigger SystemOp = "ojs.cron trigger"
)

// SystemPass describes one housekeeping pass for Config.SystemHook.
type SystemPass struct {
	Op SystemOp
	// Name is the cron schedule's name, for SystemOpCronTrigger.
	Name string
}

// SystemHook observes housekeeping passes (tracing: otelpronto makes one span per pass). It is
// called as a pass starts and returns the context the pass runs in and a function the client calls
// when the pass ends, with the number of jobs it moved or deleted (0 for a cron trigger) and its
// error. It runs on the client's maintenance goroutines: keep it quick, and never block.
type SystemHook func(ctx context.Context, p SystemPass) (context.Context, func(n int, err error))

// maintenanceOps maps the maintenance loop's passes onto SystemOps.
var maintenanceOps = map[string]SystemOp{
	maintenance.OpPromote: SystemOpSchedulerPoll,
	maintenance.OpRescue:  SystemOpReaperCheck,
	maintenance.OpCleanup: SystemOpCleanup,
}

// onMaintenancePass adapts Config.SystemHook to the maintenance loop (nil when no hook is set).
func (c *Client) onMaintenancePass() func(context.Context, string) (context.Context, func(int, error)) {
	hook := c.cfg.SystemHook
	if hook == nil {
		return nil
	}
	return func(ctx context.Context, op string) (context.Context, func(int, error)) {
		return hook(ctx, SystemPass{Op: maintenanceOps[op]})
	}
}

// onPrune emits EventDeadLetterPruned per queue the leader's cleanup pruned discarded jobs from.
func (c *Client) onPrune(perQueue map[string]int, archived bool) {
	now := time.Now()
	for q, n := range perQueue {
		c.events.emit(&Event{Kind: EventDeadLetterPruned, Job: &JobRow{Queue: q, State: StateDiscarded}, Count: n, Archived: archived, At: now})
	}
}
