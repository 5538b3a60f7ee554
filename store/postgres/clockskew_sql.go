package postgres

import (
	"strings"
	"time"

	"github.com/pronto-jobs/pronto/internal/skewclock"
)

// A completion's ScheduledAt (a retry's backoff, a snooze) is computed by the process that ran the
// job, from its own clock: written as is, a process whose clock is off would have its retries run
// that much early or late, judged by the database's now() that the claim compares it with.
// sqlFinish therefore moves it by $10, the database's clock minus this process's in microseconds
// (finishShift: a cached offset measured by round trips, clockoffset.go), zero within a second.
// The offset is measured apart from the statement, so the statement's latency (a pool wait, the
// completer's batching, a row lock) does not shift the due time, as it did when the statement
// compared the process's time it was sent with its own clock_timestamp().
const (
	finishDueAbsolute = `coalesce(u.scheduled_at, now())`
	finishDueRelative = `coalesce(u.scheduled_at + $10::bigint * interval '1 microsecond', now())`
)

// finishRelative reports whether sqlFinish holds finishDueAbsolute for finishStatement to
// replace; TestFinishStatementRelative fails when it does not.
var finishRelative = strings.Contains(sqlFinish, finishDueAbsolute)

// finishStatement returns s's sqlFinish with the due time of a retry or snooze moved to the
// database's clock, and whether it takes that shift (finishShift) as its tenth argument.
func (s *Store) finishStatement() (string, bool) {
	if !finishRelative {
		return s.q.finish, false
	}
	return strings.Replace(s.q.finish, finishDueAbsolute, finishDueRelative, 1), true
}

// processClock is this process's clock (time.Now); a test can put it off for one store
// (export_clockskew_test.go) to play a process whose machine's clock is wrong.
var processClock skewclock.Clock[*Store]

// processNow is this process's clock, as a test may have put it off (processClock).
func (s *Store) processNow() time.Time { return processClock.Now(s) }
