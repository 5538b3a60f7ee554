package postgres

import (
	"context"
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pronto-jobs/pronto/internal/clockoffset"
	"github.com/pronto-jobs/pronto/store"
)

// clockSamples is how many round trips one reading of the database's clock takes; the shortest
// decides (clockoffset.Measure), so one slowed by a loaded machine does not.
const clockSamples = 3

// sqlClockNow reads the database's clock: clock_timestamp() is the time of the statement itself,
// also inside an application's transaction (CompletePgxTx), where now() is the transaction's start.
const sqlClockNow = `SELECT clock_timestamp()`

// clockOffsets holds each Store's cached offset of the database's clock (a *clockoffset.Cache).
// Keys are weak and removed when their Store is collected, so that a Store dropped without Close
// does not stay in memory through its entry.
var clockOffsets sync.Map // weak.Pointer[Store] -> *clockoffset.Cache

// clockOffset returns s's cached offset of the database's clock from this process's.
func (s *Store) clockOffset() *clockoffset.Cache {
	k := weak.Make(s)
	if v, ok := clockOffsets.Load(k); ok {
		return v.(*clockoffset.Cache)
	}
	v, loaded := clockOffsets.LoadOrStore(k, &clockoffset.Cache{Samples: clockSamples})
	if !loaded {
		runtime.AddCleanup(s, func(k weak.Pointer[Store]) { clockOffsets.Delete(k) }, k)
	}
	return v.(*clockoffset.Cache)
}

// rowQuerier is what a pool and a transaction offer for one row.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// finishShift returns, in microseconds, how far sqlFinish moves the due times of cs (retries,
// snoozes) to put them on the database's clock: the database's clock minus this process's, zero
// within clockoffset.Tolerance or when no completion of cs has a due time of its own (no reading
// is then taken). A reading is taken through q (the pool, or the application's transaction of
// CompletePgxTx) at most once a minute; when it fails, the last offset known is used, or none.
func (s *Store) finishShift(ctx context.Context, q rowQuerier, cs ...store.Completion) int64 {
	if !dueLater(cs) {
		return 0
	}
	// From a pool, the samples share one connection: a wait for it falls into the first sample's
	// round trip only, and the shortest decides.
	var conn *pgxpool.Conn
	defer func() {
		if conn != nil {
			conn.Release()
		}
	}()
	off, err := s.clockOffset().Offset(ctx, s.processNow, func(ctx context.Context) (time.Time, error) {
		on := q
		if pool, ok := q.(*pgxpool.Pool); ok {
			if conn == nil {
				c, err := pool.Acquire(ctx)
				if err != nil {
					return time.Time{}, err
				}
				conn = c
			}
			on = conn
		}
		var now time.Time
		err := on.QueryRow(ctx, sqlClockNow).Scan(&now)
		return now, err
	})
	if err != nil {
		s.log.Debug("pronto: reading the database's clock for a retry's due time failed; using the last offset known", "error", err)
	}
	return off.Microseconds()
}

// dueLater reports whether a completion is due at a time of its own (a retry, a snooze), one that
// Finish moves to the database's clock.
func dueLater(cs []store.Completion) bool {
	for i := range cs {
		if (cs[i].State == store.StateRetryable || cs[i].State == store.StateScheduled) && !cs[i].ScheduledAt.IsZero() {
			return true
		}
	}
	return false
}
