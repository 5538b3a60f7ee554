package pronto

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// EventSchemaIncompatible: migrations that this binary does not know, and that are not marked
// compatible with older binaries, were applied to the store's schema while this client ran, so it
// stopped claiming jobs (see Client.SchemaIncompatible). Err names them and matches
// store.ErrSchemaTooNew; Job is nil. Only subscriptions that name it receive it.
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

	mu  sync.Mutex
	err error // set once: why the client stopped claiming
}

// SchemaIncompatible returns, once this started client has stopped claiming jobs because
// migrations not marked compatible with older binaries were applied to the schema while it ran,
// the error naming them (it matches store.ErrSchemaTooNew); nil otherwise. Such a client lets the
// jobs it was running finish, and reports Started false in Stats; Stop it, and run the newer
// release (or roll the migrations back with it).
func (c *Client) SchemaIncompatible() error {
	c.schemaWatch.mu.Lock()
	defer c.schemaWatch.mu.Unlock()
	return c.schemaWatch.err
}

// watchSchema reads the schema's newer migrations every schemaWatchInterval until ctx ends, and
// halts claiming once it finds ones not marked compatible. Stores without a versioned schema are
// not watched. A failed read is left for the next tick: claims meet the same outage and say so.
func (c *Client) watchSchema(ctx context.Context) {
	r, ok := c.store.(store.NewerMigrationsReader)
	if !ok {
		return
	}
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

// haltForSchema stops the client claiming jobs because the incompatible migrations were applied
// under it: its producers stop as at Stop, the jobs claimed ahead of a worker go back unstarted, and
// running jobs finish with their outcomes written (if the schema still takes them). Stop is still
// needed to end the rest (heartbeats, maintenance) and is what the operator is asked for.
func (c *Client) haltForSchema(incompatible []store.Migration) {
	names := make([]string, len(incompatible))
	for i, m := range incompatible {
		names[i] = fmt.Sprintf("%03d_%s", m.Version, m.Name)
	}
	err := fmt.Errorf("pronto: %w: migration(s) %s, not marked compatible with older binaries, were applied while this client ran; "+
		"it stopped claiming jobs: stop it and run the newer pronto, or roll them back with the newer pronto's migrate down",
		store.ErrSchemaTooNew, strings.Join(names, ", "))
	// Stats reports the client not started, so health checks (pronto serve's /ready) flag it.
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	c.produceCancel()
	for _, p := range c.producers {
		<-p.Done()
	}
	c.returnPrefetched()
	// Set once no claim runs any more: a caller that sees it knows nothing is claimed after.
	c.schemaWatch.mu.Lock()
	c.schemaWatch.err = err
	c.schemaWatch.mu.Unlock()
	c.cfg.Logger.Error("pronto: incompatible schema migrations applied; client stopped claiming jobs",
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
