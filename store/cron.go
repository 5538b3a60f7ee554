package store

import (
	"context"
	"encoding/json"
	"time"
)

// CronSchedule is one durable periodic-job registration: what to insert, on which schedule, and the
// bookkeeping that lets the elected leader fire each occurrence exactly once across restarts.
type CronSchedule struct {
	// Name identifies the schedule (unique).
	Name string
	// ID identifies this registration: a schedule deleted and registered again under the same name
	// gets a new ID, so its occurrences never collide with the old one's.
	ID string
	// Expression is the cron expression as registered ("*/5 * * * *", "@daily", "@every 30s").
	Expression string
	// Timezone is the IANA zone the expression is evaluated in ("" means UTC).
	Timezone string
	// OverlapPolicy is what to do when an occurrence is due while the previous run has not finished.
	OverlapPolicy string
	// Template describes the job each occurrence inserts; its format belongs to the caller.
	Template json.RawMessage
	// Description is free text for people.
	Description string
	Enabled     bool

	CreatedAt time.Time
	// NextRunAt is the next occurrence, due when it is at or before now.
	NextRunAt time.Time
	// LastRunAt is the latest occurrence that inserted a job (a skipped one leaves it), zero if none.
	LastRunAt time.Time
	// RunCount counts the occurrences that inserted a job.
	RunCount int64
	// LastJobID is the job the latest fired occurrence inserted, "" if none.
	LastJobID string
}

// CronAdvance moves a schedule past its due occurrence.
type CronAdvance struct {
	Name string
	// ID and From guard the update: it applies only while the schedule is this registration and its
	// NextRunAt is still From, so two leaders (an old one and a new one) cannot both advance it.
	ID   string
	From time.Time
	// Next is the new NextRunAt; RunAt becomes LastRunAt.
	Next  time.Time
	RunAt time.Time
	// JobID, when set, is the job this occurrence inserted: it becomes LastJobID and RunCount grows.
	JobID string
}

// CronStore is implemented by stores that keep cron schedules (all of pronto's stores). It is
// optional so that third-party stores without it still work; cron features then report
// ErrUnsupported.
type CronStore interface {
	// CronCreate stores a new schedule; a schedule with the same name gives ErrDuplicate.
	CronCreate(ctx context.Context, s *CronSchedule) error
	// CronGet returns one schedule, or ErrNotFound.
	CronGet(ctx context.Context, name string) (*CronSchedule, error)
	// CronList returns every schedule, by name.
	CronList(ctx context.Context) ([]*CronSchedule, error)
	// CronDelete removes a schedule and returns it as it was, or gives ErrNotFound.
	CronDelete(ctx context.Context, name string) (*CronSchedule, error)
	// CronDue returns up to limit enabled schedules whose NextRunAt is at or before now, earliest first.
	CronDue(ctx context.Context, now time.Time, limit int) ([]*CronSchedule, error)
	// CronAdvance applies a, reporting false (and changing nothing) when its guard does not hold.
	CronAdvance(ctx context.Context, a CronAdvance) (bool, error)
}

// CronPauser is implemented by stores whose cron schedules can be paused (all of pronto's stores).
// It is separate from CronStore so that a third-party CronStore without it keeps working.
type CronPauser interface {
	// CronSetEnabled pauses (enabled false) or resumes a schedule and returns it, or gives
	// ErrNotFound. A paused schedule is never due. When next is not zero it becomes NextRunAt, so
	// that a resumed schedule starts from its next occurrence rather than the ones it missed.
	CronSetEnabled(ctx context.Context, name string, enabled bool, next time.Time) (*CronSchedule, error)
}
