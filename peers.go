package pronto

import (
	"context"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/pronto-jobs/pronto/internal/maintenance"
	"github.com/pronto-jobs/pronto/internal/version"
	"github.com/pronto-jobs/pronto/store"
)

// ClientInfo is a live client of the store as it last reported itself: its id, process, version,
// the queues it works with their worker counts, and whether it leads the cluster's maintenance.
// Every started client writes its record to the store when it starts and every few seconds after
// (see ClientList).
type ClientInfo = store.ClientRecord

// ClientQueueInfo is one queue a client works: its configured workers and the jobs it was running.
type ClientQueueInfo = store.ClientQueue

// clientRecordEvery is how often a started client rewrites its record in the store's registry.
const clientRecordEvery = 2 * time.Second

// clientRecordTTL is how long a record outlives its latest write: a client silent for longer (it
// crashed, or lost the store) is not listed. Four intervals, so a slow write or two do not drop it.
const clientRecordTTL = 4*clientRecordEvery + clientRecordEvery/2

// ClientList returns every live client of the store, this one included once started, in id order:
// from any process, on every store (a client started in another process against the same
// database or Redis is listed). The leader is the client running maintenance now. Insert-only
// clients that were never started are not listed.
func (c *Client) ClientList(ctx context.Context) ([]ClientInfo, error) {
	list, err := c.store.ListClients(ctx, maintenance.LeaderName)
	if err != nil {
		return nil, err
	}
	return list, nil
}

// clientRecord is this client's record as of now.
func (c *Client) clientRecord(started time.Time) store.ClientRecord {
	host, _ := os.Hostname()
	r := store.ClientRecord{ID: c.cfg.ID, Host: host, PID: os.Getpid(), Version: version.String(), StartedAt: started}
	running := make(map[string]int)
	c.runMu.Lock()
	for _, rj := range c.running {
		if rj.cancel != nil && rj.phase.Load() == runStarted { // running: not prefetched, nor only waiting for its outcome to be written
			running[rj.row.Queue]++
		}
	}
	c.runMu.Unlock()
	for name, q := range c.cfg.Queues {
		r.Queues = append(r.Queues, store.ClientQueue{Name: name, MaxWorkers: q.MaxWorkers, Running: running[name]})
	}
	slices.SortFunc(r.Queues, func(a, b store.ClientQueue) int { return strings.Compare(a.Name, b.Name) })
	return r
}

// recordLoop writes this client's record to the store's registry now and every clientRecordEvery
// until ctx ends, then removes it. A failed write is logged: it only hides the client from
// ClientList for a while.
func (c *Client) recordLoop(ctx context.Context) {
	started := time.Now()
	put := func() {
		if err := c.store.PutClient(ctx, c.clientRecord(started), clientRecordTTL); err != nil && ctx.Err() == nil {
			c.cfg.Logger.Warn("pronto: writing the client's record failed", "client", c.cfg.ID, "err", err)
		}
	}
	put()
	t := time.NewTicker(clientRecordEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			rm, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			if err := c.store.RemoveClient(rm, c.cfg.ID); err != nil {
				c.cfg.Logger.Warn("pronto: removing the client's record failed; it expires by itself", "client", c.cfg.ID, "err", err)
			}
			return
		case <-t.C:
			put()
		}
	}
}
