package postgres

import (
	"strings"
	"time"

	"github.com/pronto-jobs/pronto/internal/skewclock"
)

// A completion's ScheduledAt (a retry's backoff, a snooze) is computed by the process that ran the
// job, from its own clock: written as is, a process whose clock is an hour off would have its
// retries run an hour early or late, judged by the database's now() that the claim compares it
// with. sqlFinish therefore keeps the delay it stands for when the calling process's clock (its
// time.Now(), sent as $10) is off the database's clock_timestamp() (the statement's own time, not
// the start of an application's transaction it may run in, as CompletePgxTx's) by more than
// clockTolerance: the job is then due ScheduledAt minus $10 after clock_timestamp(). Within the
// tolerance ScheduledAt is written exactly as given, as the stores' shared tests require; beyond it
// the database's clock decides the instant and the process's only the delay. The comparison also
// sees the statement's latency (a pool wait, the completer's batching, a row lock up to 5 s), which
// is no skew: with a 1 s tolerance a loaded machine had retries land a latency late (an OJS
// conformance retry case failed under two CI runs at once), so the tolerance is 30 s, far above any
// latency a finish survives and far below the skews worth correcting (an hour, a wrong zone).
const (
	finishDueAbsolute = `coalesce(u.scheduled_at, now())`
	finishDueRelative = `coalesce(CASE WHEN clock_timestamp() - $10::timestamptz BETWEEN -` + clockTolerance + ` AND ` + clockTolerance + `
			THEN u.scheduled_at ELSE clock_timestamp() + (u.scheduled_at - $10::timestamptz) END, now())`

	// clockTolerance is how far a process's clock may be off the database's, as seen by a
	// statement, before its due times are taken as delays (see finishDueRelative).
	clockTolerance = `interval '30 seconds'`
)

// finishRelative reports whether sqlFinish holds finishDueAbsolute for finishStatement to
// replace; TestFinishStatementRelative fails when it does not.
var finishRelative = strings.Contains(sqlFinish, finishDueAbsolute)

// finishStatement returns s's sqlFinish with the due time of a retry or snooze read against the
// database's clock, and whether it takes the caller's time as its tenth argument.
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
