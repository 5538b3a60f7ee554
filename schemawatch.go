package pronto

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pronto-jobs/pronto/internal/maintenance"
	"github.com/pronto-jobs/pronto/store"
)

// EventSchemaIncompatible: migrations that this binary does not know, and that are not marked
// compatible with older binaries, were applied to the store's schema while this client ran, so it
// stopped claiming, inserting and maintaining jobs (see Client.SchemaIncompatible). Err names them
// and matches store.ErrSchemaTooNew; Job is nil. Only subscriptions that name it receive it.
const EventSchemaIncompatible EventKind = "schema.incompatible"

// schemaWatchInterval is how often a started client reads the schema's newer migrations: a few
// small reads, rare enough to cost nothing, often enough that a forced migration stops older
// clients well within the minute.
const schemaWatchInterval = 15 * time.Second

// schemaWatch is a started client's watch for incompatible migrations applied under it.
type schemaWatch struct {
	// every, when set (tests), replaces schemaWatchInterval.
	every time.Duration
	// passes counts the reads done, for tests to wait on.
	passes atomic.Int64

	// halt is set, once, as soon as the watch finds incompatible migrations (and no remote claim
	// runs): from then on the client's inserts and remote fetches are refused (see refused).
	halt atomic.Pointer[schemaHalt]
	// fetching is read-held by each remote fetch's store claim while it runs, so that the halt can
	// wait for the claims already under way: after it, none runs.
	fetching sync.RWMutex

	// watching is set while watchSchema runs: unwatchedCheck leaves the watch to it.
	watching atomic.Bool
	// nextCheck is when (UnixNano) a client whose watch does not run next reads the newer
	// migrations itself, at its next write (unwatchedCheck).
	nextCheck atomic.Int64

	mu  sync.Mutex
	err error // set once: why the client stopped claiming
}

// schemaHalt names the incompatible migrations that halted the client.
type schemaHalt struct {
	names string // "028_x, 029_y"
}

// refused returns the error of an operation (what: "fetch", "insert of 3 job(s)") that the halt
// refuses. It matches store.ErrSchemaTooNew and names the migrations.
func (h *schemaHalt) refused(what string) error {
	return fmt.Errorf("pronto: %s refused: %w: migration(s) %s, not marked compatible with older binaries, were applied "+
		"while this client ran, and this older pronto would write in the schema's old shape: "+
		"stop it and run the newer pronto, or roll them back with the newer pronto's migrate down",
		what, store.ErrSchemaTooNew, h.names)
}

// SchemaIncompatible returns, once this client has stopped because migrations not marked
// compatible with older binaries were applied to the schema while it ran, the error naming them
// (it matches store.ErrSchemaTooNew); nil otherwise. Such a client claims no more jobs, for its own
// workers or remote ones (RemoteFetch), refuses inserts (Insert, InsertMany, InsertTx and the rest,
// cron's included) and admin writes (JobCancel, JobRetry, QueuePause and the rest), runs no
// maintenance and has resigned its leadership, so that a newer client can lead; it lets the jobs it
// was running finish, their heartbeats and outcomes still written, and reports Started false in
// Stats. Stop it, and run the newer release (or roll the migrations back with it). A started
// client finds the migrations within schemaWatchInterval; one that never started (insert-only)
// looks at its writes, at most once per schemaWatchInterval (unwatchedCheck).
func (c *Client) SchemaIncompatible() error {
	c.schemaWatch.mu.Lock()
	defer c.schemaWatch.mu.Unlock()
	return c.schemaWatch.err
}

// remoteClaim is the store claim of a remote fetch (RemoteFetch, directly or through the fetch
// batcher): refused once the client halted for incompatible migrations, and counted in
// schemaWatch.fetching while it runs so that the halt can wait for it.
func (c *Client) remoteClaim(ctx context.Context, p store.ClaimParams) ([]*store.Job, error) {
	c.schemaWatch.fetching.RLock()
	defer c.schemaWatch.fetching.RUnlock()
	if h := c.schemaWatch.halt.Load(); h != nil {
		return nil, h.refused("fetch")
	}
	return c.claim(ctx, p)
}

// haltRefusal returns the halt's refusal of the write what ("cancel of job x") once the client
// halted for incompatible migrations, and nil before: an older binary must not write in the newer
// schema, an admin write no more than an insert. A client whose watch does not run reads the
// migrations here first (unwatchedCheck).
func (c *Client) haltRefusal(ctx context.Context, what string) error {
	if h := c.schemaWatch.halt.Load(); h != nil {
		return h.refused(what)
	}
	c.unwatchedCheck(ctx)
	if h := c.schemaWatch.halt.Load(); h != nil {
		return h.refused(what)
	}
	return nil
}

// unwatchedCheck reads the schema's newer migrations for a client whose watch does not run (one
// never started: an insert-only client), at most once per schemaWatchInterval, and halts it when
// it finds ones not marked compatible. The write that comes due reads, in its own round trip; the
// others meanwhile go on, as they would while a started client's watch waits for its tick. A
// failed read is left for the next interval: the write meets the same outage and says so.
func (c *Client) unwatchedCheck(ctx context.Context) {
	if c.schemaWatch.watching.Load() {
		return
	}
	r, ok := c.store.(store.NewerMigrationsReader)
	if !ok {
		return
	}
	now := time.Now().UnixNano()
	next := c.schemaWatch.nextCheck.Load()
	if now < next || !c.schemaWatch.nextCheck.CompareAndSwap(next, now+int64(cmpDuration(c.schemaWatch.every, schemaWatchInterval))) {
		return
	}
	_, incompatible, err := r.NewerMigrations(ctx)
	c.schemaWatch.passes.Add(1)
	if err != nil {
		c.cfg.Logger.Debug("pronto: reading the schema's newer migrations failed", "client", c.cfg.ID, "err", err)
		return
	}
	if len(incompatible) == 0 || c.schemaWatch.watching.Load() {
		return // a watch started meanwhile halts the client the whole way
	}
	names := migrationNames(incompatible)
	c.schemaWatch.fetching.Lock()
	c.schemaWatch.halt.Store(&schemaHalt{names: names})
	c.schemaWatch.fetching.Unlock()
	err = schemaHaltError(names)
	c.schemaWatch.mu.Lock()
	c.schemaWatch.err = err
	c.schemaWatch.mu.Unlock()
	c.cfg.Logger.Error("pronto: incompatible schema migrations applied; client stopped inserting and writing jobs",
		"client", c.cfg.ID, "migrations", names, "err", err)
	c.events.emit(&Event{Kind: EventSchemaIncompatible, Err: err, At: time.Now()})
}

// migrationNames lists migrations as "028_x, 029_y".
func migrationNames(ms []store.Migration) string {
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = fmt.Sprintf("%03d_%s", m.Version, m.Name)
	}
	return strings.Join(names, ", ")
}

// schemaHaltError is SchemaIncompatible's error for the migrations names.
func schemaHaltError(names string) error {
	return fmt.Errorf("pronto: %w: migration(s) %s, not marked compatible with older binaries, were applied while this client ran; "+
		"it stopped claiming, inserting and maintaining jobs: stop it and run the newer pronto, or roll them back with the newer pronto's migrate down",
		store.ErrSchemaTooNew, names)
}

// watchSchema reads the schema's newer migrations every schemaWatchInterval until ctx ends, and
// halts claiming once it finds ones not marked compatible. Stores without a versioned schema are
// not watched. A failed read is left for the next tick: claims meet the same outage and say so.
func (c *Client) watchSchema(ctx context.Context) {
	r, ok := c.store.(store.NewerMigrationsReader)
	if !ok {
		return
	}
	// A stopped client's writes go on being checked, by unwatchedCheck.
	c.schemaWatch.watching.Store(true)
	defer c.schemaWatch.watching.Store(false)
	t := time.NewTicker(cmpDuration(c.schemaWatch.every, schemaWatchInterval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, incompatible, err := r.NewerMigrations(ctx)
		c.schemaWatch.passes.Add(1)
		if err != nil {
			if ctx.Err() == nil {
				c.cfg.Logger.Debug("pronto: reading the schema's newer migrations failed", "client", c.cfg.ID, "err", err)
			}
			continue
		}
		if len(incompatible) > 0 {
			c.haltForSchema(incompatible)
			return
		}
	}
}

// haltForSchema stops what the client writes because the incompatible migrations were applied
// under it, the rows it would write being in a shape the schema may no longer mean: inserts and
// remote fetches are refused at once (those under way end first); its producers stop as at Stop;
// the jobs claimed ahead of a worker go back unstarted; the leader's maintenance stops and its
// leadership is resigned, so that a newer client takes it over. Running jobs finish, heartbeated,
// with their outcomes written (if the schema still takes them). Stop is still needed to end the rest
// (heartbeats, the client's registration) and is what the operator is asked for.
func (c *Client) haltForSchema(incompatible []store.Migration) {
	names := migrationNames(incompatible)
	// Set once the remote claims under way have ended: every one after it sees the halt.
	c.schemaWatch.fetching.Lock()
	c.schemaWatch.halt.Store(&schemaHalt{names: names})
	c.schemaWatch.fetching.Unlock()
	err := schemaHaltError(names)
	// Stats reports the client not started, so health checks (pronto serve's /ready) flag it.
	// Start has returned (it holds mu), so the maintainer, if any, is set.
	c.mu.Lock()
	c.stopped = true
	m, stopMaintenance := c.maintainer, c.maintenanceCancel
	c.mu.Unlock()
	c.produceCancel()
	for _, p := range c.producers {
		<-p.Done()
	}
	if c.presenceDone != nil {
		// It claims no more, so it says so as Stop does: the others stop leaving to it the jobs
		// whose notification picks it, at once rather than when its presence expires.
		<-c.presenceDone
		gone, cancel := context.WithTimeout(context.Background(), time.Second)
		c.signal(gone, []store.Notification{{Kind: store.NotifyGone, Client: c.cfg.ID}})
		cancel()
	}
	c.returnPrefetched()
	if m != nil {
		stopMaintenance()
		<-m.Done()
		// Run resigns as it returns only if it knew itself leader: an election the cancel cut short
		// leaves the office held until its TTL runs out. Resigning here frees it at once, and only
		// if this client holds it.
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := c.store.Resign(rctx, maintenance.LeaderName, c.cfg.ID); err != nil {
			c.cfg.Logger.Warn("pronto: resigning maintenance leadership failed; it lapses with its TTL", "client", c.cfg.ID, "err", err)
		}
		cancel()
	}
	// Set once no claim runs any more: a caller that sees it knows nothing is claimed after.
	c.schemaWatch.mu.Lock()
	c.schemaWatch.err = err
	c.schemaWatch.mu.Unlock()
	c.cfg.Logger.Error("pronto: incompatible schema migrations applied; client stopped claiming, inserting and maintaining jobs",
		"client", c.cfg.ID, "migrations", names, "err", err)
	// Only subscriptions naming it get it (subscription.takes): subscribers of every kind expect a
	// job in each event, and this one has none.
	c.events.emit(&Event{Kind: EventSchemaIncompatible, Err: err, At: time.Now()})
}

// cmpDuration returns d, or def when d is not positive.
func cmpDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
