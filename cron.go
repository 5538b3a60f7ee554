package pronto

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/pronto-jobs/pronto/internal/jsoncheck"
	"github.com/pronto-jobs/pronto/internal/skewclock"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// Cron: periodic jobs from durable schedules. A schedule is registered once (CronRegister) and kept in
// the store; RunCron, running in any number of processes, elects one leader per store, and the leader
// inserts each due occurrence's job. An occurrence's job has an id derived from the registration and
// the occurrence's time, and the schedule moves to its next occurrence only after that job exists, with
// an update guarded by the occurrence it moves from: a leader that dies mid-way, or two leaders during
// a hand-over, insert the same id at most once. A restart therefore neither misses an occurrence (a
// late leader fires the one it missed, once) nor doubles one.

// CronOverlapPolicy says what an occurrence does when the previous occurrence's job has not finished.
type CronOverlapPolicy string

// Overlap policies (OJS cron specification, section 6).
const (
	// CronSkip skips the occurrence while the previous job is not in a terminal state. The default.
	CronSkip CronOverlapPolicy = "skip"
	// CronAllow always inserts a job.
	CronAllow CronOverlapPolicy = "allow"
	// CronCancelPrevious cancels the previous job if it has not finished, then inserts a job.
	CronCancelPrevious CronOverlapPolicy = "cancel_previous"
	// CronEnqueue always inserts a job; it waits in the queue like any other. (pronto does not hold it
	// back while the previous job runs: use a queue worked by one worker for strict sequencing.)
	CronEnqueue CronOverlapPolicy = "enqueue"
)

// CronJob is a periodic job registration: a schedule and the job each occurrence inserts.
type CronJob struct {
	// Name identifies the registration: [a-z0-9][a-z0-9.-]*, at most 255 characters.
	Name string
	// Expression is a 5-field cron expression (minute hour day-of-month month day-of-week), a 6-field
	// one with seconds first, or a descriptor: @yearly, @annually, @monthly, @weekly, @daily,
	// @midnight, @hourly, or @every <Go duration> (whole seconds, at least 1s).
	Expression string
	// Timezone is the IANA zone the expression is read in ("America/New_York"); empty means UTC.
	Timezone string
	// Kind and Args are the job's OJS type and args (a JSON array; nil means []).
	Kind string
	Args json.RawMessage
	// Opts are the job's insert options. Queue, Priority, MaxAttempts, RetryPolicy, Timeout, Tags,
	// Meta, Unique, RateKey, RateLimit and Tenant apply; ID, ScheduledAt, Delay, ExpiresAt and Pending
	// must be zero. Each job's meta also gets "cron_name" and "cron_triggered_at".
	Opts InsertOpts
	// OverlapPolicy defaults to CronSkip.
	OverlapPolicy CronOverlapPolicy
	// Description is free text for people.
	Description string
	// Paused is true between CronPause and CronResume: no occurrence fires. CronRegister stores a
	// registration given Paused as paused in the same write that creates it, so none of its
	// occurrences fires before CronResume.
	Paused bool

	// Set by pronto.
	CreatedAt time.Time
	NextRunAt time.Time
	LastRunAt time.Time // the latest occurrence that inserted a job; zero until one did
	RunCount  int64     // occurrences that inserted a job
	// LastJobID is the job of the latest occurrence that inserted one. A registration made again
	// under a name (after CronDelete) starts with the previous one's unfinished job here, so that its
	// overlap policy, which goes by the name (OJS cron 6.3), still sees that job.
	LastJobID string
}

// cronParser reads 5- and 6-field expressions and descriptors.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// CronSchedule is a parsed expression in its zone.
type CronSchedule struct {
	sched cron.Schedule
	loc   *time.Location
	// fixed: the expression names its hours ("30 2 * * *", "*/30 1 * * *", @daily), so a
	// daylight-saving change moves it rather than dropping or repeating it (see Next).
	fixed bool
}

// Next returns the first occurrence strictly after t.
//
// Across a daylight-saving change, a schedule that names its hours runs as cron daemons (Vixie,
// ISC) run it: each of its times once on the day the clocks go back (at the first of the two
// readings), and, when its time falls in the hour the clocks skip, at the moment they jump. A
// schedule with "*" in its hour ("0 * * * *", "0 */2 * * *") runs by the clock as it is: an hourly
// job runs once per real hour either way.
func (s CronSchedule) Next(t time.Time) time.Time {
	if !s.fixed {
		return s.sched.Next(t.In(s.loc)).UTC()
	}
	// A fixed schedule is a set of wall-clock times. Each one runs at the first instant the zone's
	// clock reads it or later (firstReading): the first of two readings when the clocks go back, the
	// jump when they skip it. Those instants grow with the wall time, so the answer is the earliest
	// matching wall time whose instant is after t. It reads later than t's own clock; the few after
	// it that are not (read once already, before the clocks went back) are passed over. The
	// schedule is evaluated on wall times written as UTC, which have no gaps or repeats: robfig's
	// own stepping through a zone's changes skips whole days (a 30-minute change, as Lord Howe's).
	lt := t.In(s.loc)
	w := time.Date(lt.Year(), lt.Month(), lt.Day(), lt.Hour(), lt.Minute(), lt.Second(), lt.Nanosecond(), time.UTC)
	for range 100000 { // bounded: a schedule's readings within one repeated stretch of wall time
		if w = s.sched.Next(w); w.IsZero() {
			return time.Time{}
		}
		if u := firstReading(w, s.loc); u.After(t) {
			return u.UTC()
		}
	}
	return time.Time{}
}

// firstReading returns the first instant at which loc's clock reads w (a wall time written as UTC)
// or later: the instant w names, the first of two when the clocks go back over it, or the moment
// they jump when they skip it.
func firstReading(w time.Time, loc *time.Location) time.Time {
	// The instants that can read w are w less an offset loc uses around then; a change of offset
	// within 15 hours of w on either side is the only one that can make w repeat or not exist.
	_, before := w.Add(-15 * time.Hour).In(loc).Zone()
	_, after := w.Add(15 * time.Hour).In(loc).Zone()
	reads := func(u time.Time) bool {
		lu := u.In(loc)
		return sameWallClock(lu, w)
	}
	ub := w.Add(-time.Duration(before) * time.Second)
	ua := w.Add(-time.Duration(after) * time.Second)
	okB, okA := reads(ub), reads(ua)
	switch {
	case okB && okA:
		if ua.Before(ub) {
			return ua
		}
		return ub
	case okB:
		return ub
	case okA:
		return ua
	case before < after:
		// Skipped: the clocks jumped over w, between ua (before the jump) and ub (after it).
		return zoneChange(ua, ub, loc)
	}
	// Two changes within the window (not in any zone today): Go's own choice.
	return time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), loc)
}

// sameWallClock reports whether a's clock reads the date and time that w (a wall time written as
// UTC) names.
func sameWallClock(a, w time.Time) bool {
	y1, m1, d1 := a.Date()
	y2, m2, d2 := w.Date()
	return y1 == y2 && m1 == m2 && d1 == d2 && a.Hour() == w.Hour() && a.Minute() == w.Minute() &&
		a.Second() == w.Second() && a.Nanosecond() == w.Nanosecond()
}

// zoneChange returns the first instant after a, up to b, whose UTC offset in loc is b's (the zone's
// offset changes between them), to the second.
func zoneChange(a, b time.Time, loc *time.Location) time.Time {
	_, offB := b.In(loc).Zone()
	lo, hi := a, b
	for hi.Sub(lo) > time.Second {
		mid := lo.Add(hi.Sub(lo) / 2)
		if _, off := mid.In(loc).Zone(); off == offB {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi.Truncate(time.Second)
}

// fixedTime reports whether a parsed expression names its hours (see CronSchedule.fixed): no "*"
// in its hour field. The minute and second fields do not matter: "*/30 1 * * *" names 1:00 and
// 1:30, as "0,30 1 * * *" does (OJS cron 5.2, CRON-17: a time the clocks read twice runs once).
func fixedTime(expr string) bool {
	if strings.HasPrefix(expr, "@") {
		switch expr {
		case "@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight":
			return true
		}
		return false // @hourly, @every
	}
	f := strings.Fields(expr)
	if len(f) == 6 {
		f = f[1:] // seconds first
	}
	return len(f) >= 2 && !strings.Contains(f[1], "*")
}

// ParseCron validates a cron expression and IANA timezone ("" is UTC) and returns the schedule, or an
// error matching ErrInvalidArgs that says what is wrong. The timezone is checked first, as
// CronLocation checks it. In the day-of-week field both 0 and 7 are Sunday.
func ParseCron(expression, timezone string) (CronSchedule, error) {
	expr := strings.TrimSpace(expression)
	if expr == "" {
		return CronSchedule{}, invalidf("cron expression is empty")
	}
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return CronSchedule{}, invalidf("cron expression %q: give the zone as the timezone, not in the expression", expression)
	}
	loc, err := CronLocation(timezone)
	if err != nil {
		return CronSchedule{}, err
	}
	if every, ok := strings.CutPrefix(expr, "@every "); ok {
		if d, err := time.ParseDuration(strings.TrimSpace(every)); err == nil && d < time.Second {
			return CronSchedule{}, invalidf("cron expression %q: @every needs at least 1s", expression)
		} else if err == nil && d%time.Second != 0 {
			// The schedule counts whole seconds: 1500ms would fire every second.
			return CronSchedule{}, invalidf("cron expression %q: @every takes whole seconds", expression)
		}
	}
	if !strings.HasPrefix(expr, "@") {
		// The parser drops an empty list item ("1,,5", "1,5,"): a typo that would run on other
		// days than meant (OJS cron 3.5: a malformed expression is refused).
		for _, field := range strings.Fields(expr) {
			if slices.Contains(strings.Split(field, ","), "") {
				return CronSchedule{}, invalidf("cron expression %q: empty item in the list %q", expression, field)
			}
		}
	}
	sched, err := cronParser.Parse(sundayAsSeven(expr))
	if err != nil {
		return CronSchedule{}, invalidf("cron expression %q: %v", expression, err)
	}
	cs := CronSchedule{sched: sched, loc: loc, fixed: fixedTime(expr)}
	// The parser accepts fields that never meet ("0 0 30 2 *", February 30th) and then answers the
	// zero time, which a scheduler would take as due at once, forever.
	if cs.Next(time.Now()).IsZero() {
		return CronSchedule{}, invalidf("cron expression %q: no occurrence in the next five years (a date that does not exist, such as February 30th?)", expression)
	}
	return cs, nil
}

// posixZone matches the IANA zones named by their POSIX rule, such as "EST5EDT": unlike "EST" they
// follow daylight saving time.
var posixZone = regexp.MustCompile(`^[A-Z]{3}[0-9]{1,2}[A-Z]{3}$`)

// CronLocation validates a cron registration's timezone and returns its location: "" and "UTC" are
// UTC, anything else must be an IANA zone that follows its region's clock. Fixed offsets
// ("+05:00", "Etc/GMT+5", or any zone whose offset never changed) and abbreviations ("EST") are
// refused with an error matching ErrInvalidArgs (OJS cron 5.1, CRON-14): they do not follow
// daylight saving time, so a schedule in one runs an hour off for half the year. The zones at
// offset zero ("Etc/UTC", "Etc/GMT") are UTC by another name and are accepted. The system's
// "posix/" copies of the zones are read as the zones themselves ("posix/Etc/GMT+5" is
// "Etc/GMT+5"); its "right/" ones are refused: they count leap seconds, which Go's time does not,
// so their times are off by those seconds.
func CronLocation(timezone string) (*time.Location, error) {
	if timezone == "" || timezone == "UTC" {
		return time.UTC, nil
	}
	if strings.HasPrefix(timezone, "right/") {
		return nil, invalidf("timezone %q: a zone counting leap seconds; use %q", timezone, strings.TrimPrefix(timezone, "right/"))
	}
	name := strings.TrimPrefix(timezone, "posix/")
	// Names without a region ("EST", "CET", "GMT+5") are abbreviations or offsets, but for the
	// POSIX-rule zones, which carry their daylight saving rule in the name.
	if !strings.Contains(name, "/") && !posixZone.MatchString(name) {
		return nil, invalidf("timezone %q: use an IANA zone name such as \"America/New_York\" or \"UTC\"", timezone)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, invalidf("timezone %q: not a known IANA zone", timezone)
	}
	// Etc/GMT+5 (five hours west, not east) is a fixed offset written as a zone, as are other names
	// outside the regions; a place's zone has changed offset at least once (from its local mean
	// time), even where it keeps no daylight saving time now.
	if off, fixed := fixedOffset(loc); fixed && off != 0 {
		return nil, invalidf("timezone %q: a fixed UTC offset; use the IANA zone of a place, such as \"America/New_York\"", timezone)
	}
	return loc, nil
}

// fixedOffset reports whether loc has had one UTC offset from 1850 to 2040, and which.
func fixedOffset(loc *time.Location) (int, bool) {
	_, first := time.Date(1850, 1, 1, 0, 0, 0, 0, loc).Zone()
	for year := 1850; year <= 2040; year++ {
		for _, month := range []time.Month{time.January, time.July} {
			if _, off := time.Date(year, month, 1, 0, 0, 0, 0, loc).Zone(); off != first {
				return 0, false
			}
		}
	}
	return first, true
}

// ValidCronName reports whether name is an acceptable cron registration name.
func ValidCronName(name string) bool { return len(name) <= 255 && validName(name, false) }

// cronTemplate is how a CronJob's job is kept in the store.
type cronTemplate struct {
	Kind        string          `json:"kind"`
	Args        json.RawMessage `json:"args"`
	Queue       string          `json:"queue,omitempty"`
	Priority    int             `json:"priority,omitempty"`
	MaxAttempts int             `json:"max_attempts,omitempty"`
	Retry       *RetryPolicy    `json:"retry,omitempty"`
	TimeoutMS   int64           `json:"timeout_ms,omitempty"`
	Tags        []string        `json:"tags,omitempty"`
	Meta        json.RawMessage `json:"meta,omitempty"`
	Unique      *UniqueOpts     `json:"unique,omitempty"`
	RateKey     string          `json:"rate_key,omitempty"`
	RateLimit   *RateLimit      `json:"rate_limit,omitempty"`
	Tenant      string          `json:"tenant,omitempty"`
}

func (c *Client) cronStore() (store.CronStore, error) {
	cs, ok := c.store.(store.CronStore)
	if !ok {
		return nil, fmt.Errorf("%w: cron needs a store that keeps schedules (this client's store is %T)", ErrUnsupported, c.store)
	}
	return cs, nil
}

// CronRegister validates and stores a new periodic job, paused if j.Paused is set. A registration
// with the same name gives an error matching ErrDuplicate; to change one, delete it and register it
// again: the new registration takes over the job the old one left unfinished, so its overlap policy
// still applies to that job.
func (c *Client) CronRegister(ctx context.Context, j CronJob) (*CronJob, error) {
	cs, err := c.cronStore()
	if err != nil {
		return nil, err
	}
	if !ValidCronName(j.Name) {
		return nil, invalidf("cron name %q: must match [a-z0-9][a-z0-9.-]* (at most 255 characters)", j.Name)
	}
	for _, f := range []struct{ v, name string }{{j.Expression, "expression"}, {j.Timezone, "timezone"}, {j.Description, "description"}} {
		if err := jsoncheck.CheckString(f.v, f.name); err != nil {
			return nil, fmt.Errorf("%w: cron %q: %w", ErrInvalidArgs, j.Name, err)
		}
	}
	sched, err := ParseCron(j.Expression, j.Timezone)
	if err != nil {
		return nil, err
	}
	switch j.OverlapPolicy {
	case "":
		j.OverlapPolicy = CronSkip
	case CronSkip, CronAllow, CronCancelPrevious, CronEnqueue:
	default:
		return nil, invalidf("cron overlap policy %q: must be skip, allow, cancel_previous or enqueue", j.OverlapPolicy)
	}
	o := j.Opts
	if o.ID != "" || !o.ScheduledAt.IsZero() || o.Delay != 0 || !o.ExpiresAt.IsZero() || o.Pending {
		return nil, invalidf("cron %q: ID, ScheduledAt, Delay, ExpiresAt and Pending do not apply to periodic jobs", j.Name)
	}
	if len(j.Args) == 0 {
		j.Args = json.RawMessage("[]")
	}
	// Validate the job now, as each occurrence will build it.
	if _, err := c.resolveOJS(OJSJob{Kind: j.Kind, Args: j.Args, Opts: o}); err != nil {
		return nil, err
	}
	t := cronTemplate{
		Kind: j.Kind, Args: j.Args, Queue: o.Queue, Priority: o.Priority, MaxAttempts: o.MaxAttempts,
		Retry: o.RetryPolicy, TimeoutMS: o.Timeout.Milliseconds(), Tags: o.Tags,
		Unique: o.Unique, RateKey: o.RateKey, RateLimit: o.RateLimit, Tenant: o.Tenant,
	}
	if o.Meta != nil {
		if t.Meta, err = json.Marshal(o.Meta); err != nil {
			return nil, invalidf("cron %q: meta does not encode as JSON: %v", j.Name, err)
		}
	}
	tb, err := json.Marshal(t)
	if err != nil {
		return nil, invalidf("cron %q: %v", j.Name, err)
	}
	prev, err := c.cronPreviousJob(ctx, j.Name)
	if err != nil {
		return nil, wrapOp(fmt.Sprintf("register cron %q", j.Name), err)
	}
	now, err := c.cronNow(ctx)
	if err != nil {
		return nil, wrapOp(fmt.Sprintf("register cron %q", j.Name), err)
	}
	now = now.UTC().Truncate(time.Microsecond)
	s := &store.CronSchedule{
		Name: j.Name, ID: uuidv7.New(), Expression: j.Expression, Timezone: j.Timezone,
		OverlapPolicy: string(j.OverlapPolicy), Template: tb, Description: j.Description, Enabled: !j.Paused,
		CreatedAt: now, NextRunAt: sched.Next(now), LastJobID: prev,
	}
	if err := cs.CronCreate(ctx, s); err != nil {
		return nil, wrapOp(fmt.Sprintf("register cron %q", j.Name), err)
	}
	if prev != "" {
		// The registration holds the job now. A note left behind is harmless: the next
		// registration under the name would find the job finished, or take it over again.
		if err := c.setCronPreviousJob(ctx, j.Name, ""); err != nil {
			c.cfg.Logger.Warn("pronto: cron: clearing the previous registration's job failed", "cron", j.Name, "err", err)
		}
	}
	return cronJobOf(s)
}

// cronPreviousJobKey is the SettingStore key under which CronDelete leaves the unfinished job of a
// deleted registration, for the next registration under its name to take over. Overlap is a
// matter of the name (OJS cron 6.3), and the leader checks it on each occurrence by the
// registration's LastJobID alone: a note kept per name, read on register, costs the firing nothing.
func cronPreviousJobKey(name string) string { return "cron.previous_job." + name }

// cronPreviousJob returns the job a deleted registration under name left unfinished, or "".
func (c *Client) cronPreviousJob(ctx context.Context, name string) (string, error) {
	ss, ok := c.store.(store.SettingStore)
	if !ok {
		return "", nil
	}
	raw, err := ss.GetSetting(ctx, cronPreviousJobKey(name))
	if err != nil || raw == nil {
		return "", err
	}
	var v struct {
		JobID string `json:"job_id"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", nil // unreadable: nothing to take over
	}
	return v.JobID, nil
}

// setCronPreviousJob keeps id as the unfinished job of the registration under name ("" removes it).
func (c *Client) setCronPreviousJob(ctx context.Context, name, id string) error {
	ss, ok := c.store.(store.SettingStore)
	if !ok {
		return nil
	}
	if id == "" {
		return ss.SetSetting(ctx, cronPreviousJobKey(name), nil)
	}
	raw, err := json.Marshal(map[string]string{"job_id": id})
	if err != nil {
		return err
	}
	return ss.SetSetting(ctx, cronPreviousJobKey(name), raw)
}

// CronGet returns a registration, or an error matching ErrNotFound.
func (c *Client) CronGet(ctx context.Context, name string) (*CronJob, error) {
	cs, err := c.cronStore()
	if err != nil {
		return nil, err
	}
	s, err := cs.CronGet(ctx, name)
	if err != nil {
		return nil, wrapOp(fmt.Sprintf("get cron %q", name), err)
	}
	return cronJobOf(s)
}

// CronList returns every registration, by name.
func (c *Client) CronList(ctx context.Context) ([]*CronJob, error) {
	cs, err := c.cronStore()
	if err != nil {
		return nil, err
	}
	ss, err := cs.CronList(ctx)
	if err != nil {
		return nil, wrapOp("list cron", err)
	}
	out := make([]*CronJob, 0, len(ss))
	for _, s := range ss {
		j, err := cronJobOf(s)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, nil
}

// CronDelete removes a registration and returns it as it was, or gives an error matching ErrNotFound.
// Jobs its occurrences already inserted are not affected; if its latest job is unfinished, a
// registration made again under the name takes it over (see CronRegister).
func (c *Client) CronDelete(ctx context.Context, name string) (*CronJob, error) {
	cs, err := c.cronStore()
	if err != nil {
		return nil, err
	}
	s, err := cs.CronDelete(ctx, name)
	if err != nil {
		return nil, wrapOp(fmt.Sprintf("delete cron %q", name), err)
	}
	if s.LastJobID != "" {
		// Only an unfinished job matters to the next registration's overlap policy; a finished one
		// leaves no note behind. The registration is gone either way, so a failure here is logged,
		// not returned: a caller retrying the delete would only be told it is not found.
		j, err := c.store.GetJob(ctx, s.LastJobID)
		if err == nil && !j.State.Terminal() {
			err = c.setCronPreviousJob(ctx, name, j.ID)
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			c.cfg.Logger.Warn("pronto: cron: keeping the deleted registration's unfinished job for the next one failed",
				"cron", name, "job", s.LastJobID, "err", err)
		}
	}
	return cronJobOf(s)
}

// CronPause stops a registration's occurrences until CronResume, and returns it; an unknown name
// gives an error matching ErrNotFound. Jobs already inserted are not affected.
func (c *Client) CronPause(ctx context.Context, name string) (*CronJob, error) {
	cp, err := c.cronPauser()
	if err != nil {
		return nil, err
	}
	s, err := cp.CronSetEnabled(ctx, name, false, time.Time{})
	if err != nil {
		return nil, wrapOp(fmt.Sprintf("pause cron %q", name), err)
	}
	return cronJobOf(s)
}

// CronResume lets a paused registration fire again, from its next occurrence after now: the
// occurrences missed while paused are not made up. An unknown name gives an error matching
// ErrNotFound.
func (c *Client) CronResume(ctx context.Context, name string) (*CronJob, error) {
	cp, err := c.cronPauser()
	if err != nil {
		return nil, err
	}
	cs, _ := c.cronStore()
	cur, err := cs.CronGet(ctx, name)
	if err != nil {
		return nil, wrapOp(fmt.Sprintf("resume cron %q", name), err)
	}
	if cur.Enabled {
		return cronJobOf(cur) // not paused: its next occurrence stands
	}
	sched, err := ParseCron(cur.Expression, cur.Timezone)
	if err != nil {
		return nil, err
	}
	now, err := c.cronNow(ctx)
	if err != nil {
		return nil, wrapOp(fmt.Sprintf("resume cron %q", name), err)
	}
	s, err := cp.CronSetEnabled(ctx, name, true, sched.Next(now))
	if err != nil {
		return nil, wrapOp(fmt.Sprintf("resume cron %q", name), err)
	}
	return cronJobOf(s)
}

func (c *Client) cronPauser() (store.CronPauser, error) {
	cp, ok := c.store.(store.CronPauser)
	if !ok {
		return nil, fmt.Errorf("%w: pausing cron needs a store that can (this client's store is %T)", ErrUnsupported, c.store)
	}
	return cp, nil
}

func cronJobOf(s *store.CronSchedule) (*CronJob, error) {
	var t cronTemplate
	if err := json.Unmarshal(s.Template, &t); err != nil {
		return nil, fmt.Errorf("pronto: cron %q: unreadable job template: %w", s.Name, err)
	}
	j := &CronJob{
		Name: s.Name, Expression: s.Expression, Timezone: s.Timezone, Kind: t.Kind, Args: t.Args,
		OverlapPolicy: CronOverlapPolicy(s.OverlapPolicy), Description: s.Description, Paused: !s.Enabled,
		CreatedAt: s.CreatedAt, NextRunAt: s.NextRunAt, LastRunAt: s.LastRunAt, RunCount: s.RunCount,
		LastJobID: s.LastJobID,
		Opts: InsertOpts{
			Queue: t.Queue, Priority: t.Priority, MaxAttempts: t.MaxAttempts, RetryPolicy: t.Retry,
			Timeout: time.Duration(t.TimeoutMS) * time.Millisecond, Tags: t.Tags,
			Unique: t.Unique, RateKey: t.RateKey, RateLimit: t.RateLimit, Tenant: t.Tenant,
		},
	}
	if len(t.Meta) > 0 {
		m, err := decodeMeta(t.Meta)
		if err != nil {
			return nil, fmt.Errorf("pronto: cron %q: unreadable meta: %w", s.Name, err)
		}
		j.Opts.Meta = m
	}
	return j, nil
}

// decodeMeta reads a JSON object keeping numbers exact.
func decodeMeta(b json.RawMessage) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}

// CronFire reports one occurrence handled by the cron leader.
type CronFire struct {
	Name       string
	Expression string
	// ScheduledAt is the occurrence's time.
	ScheduledAt time.Time
	// Kind and Queue are the job type and queue of the occurrence's job, from the registration's
	// template: set when the occurrence was skipped too, naming the job it did not insert.
	Kind  string
	Queue string
	// Job is the job the occurrence inserted, nil when it was skipped.
	Job *JobRow
	// Skipped is set when the overlap policy, or the template's unique policy, skipped the occurrence;
	// SkipReason says which, and PreviousJobID is the unfinished job (or the unique key's holder)
	// that caused it.
	Skipped       bool
	SkipReason    CronSkipReason
	PreviousJobID string
}

// CronSkipReason says why an occurrence inserted no job: the reason of OJS's cron.skipped event.
type CronSkipReason string

// Skip reasons. OJS cron 9.2 also names "disabled" and "dst_skip", which pronto never reports: a
// paused registration has no occurrences to skip, and an occurrence the clocks skip fires at the
// jump (see CronSchedule.Next).
const (
	// CronSkipOverlap: the previous occurrence's job had not finished and the overlap policy is
	// CronSkip (OJS cron 9.2's overlap_skip).
	CronSkipOverlap CronSkipReason = "overlap_skip"
	// CronSkipUnique: the template's unique policy refused the job, another job holding its key.
	// OJS allows no reason for it: the HTTP server reports it as overlap_skip with pronto's
	// unique_conflict: true.
	CronSkipUnique CronSkipReason = "unique_conflict"
)

// CronConfig configures RunCron.
type CronConfig struct {
	// Interval is how often the leader looks for due occurrences (default and minimum 1 s).
	Interval time.Duration
	// OnFire, if set, is called after each occurrence is handled, on the cron goroutine.
	OnFire func(CronFire)
	// BeforeInsert, if set, is called on the cron goroutine with the id of the job an occurrence is
	// about to insert, before the insert: a worker may take the job before OnFire reports it. The
	// func it returns is called once the occurrence is handled (after OnFire, or when the insert or
	// the schedule's advance failed).
	BeforeInsert func(jobID string) (done func())
}

// cronLeaderName is the leadership row the cron scheduler elects on, separate from maintenance's.
const cronLeaderName = "cron"

// RunCron runs the cron scheduler until ctx is done: it takes part in the election of the store's
// cron leader and, while it leads, inserts the jobs of due occurrences. Run it in every process that
// should be able to take over; only the leader fires. While maintenance mode is on (pronto serve's
// admin API), it fires nothing; afterwards each schedule fires its latest missed occurrence once. It
// returns nil when ctx ends, an error matching ErrUnsupported when the store keeps no schedules, or,
// once the client halted for incompatible migrations (SchemaIncompatible), that error, after giving
// up the leadership.
func (c *Client) RunCron(ctx context.Context, cfg *CronConfig) error {
	cs, err := c.cronStore()
	if err != nil {
		return err
	}
	if cfg == nil {
		cfg = &CronConfig{}
	}
	interval := max(cfg.Interval, time.Second)
	ttl := c.cfg.LeaderTTL
	if ttl <= 0 {
		ttl = DefaultLeaderTTL
	}
	elect := time.NewTicker(ttl / 3)
	defer elect.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	leader := false
	doElect := func() {
		ok, err := c.store.Elect(ctx, cronLeaderName, c.cfg.ID, ttl)
		if err != nil {
			if ctx.Err() == nil {
				c.cfg.Logger.Warn("pronto: cron leader election failed", "err", err)
			}
			leader = false
			return
		}
		if ok != leader {
			c.cfg.Logger.Info("pronto: cron leadership changed", "client", c.cfg.ID, "leader", ok)
		}
		leader = ok
	}
	doElect()
	held := false
	resign := func() {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = c.store.Resign(rctx, cronLeaderName, c.cfg.ID)
		cancel()
	}
	for {
		// A client halted by incompatible migrations writes nothing in the schema's old shape: it
		// gives the leadership up at once so that a client of the newer release fires instead, also
		// when the last election's answer was lost (as at stop, below).
		if err := c.SchemaIncompatible(); err != nil {
			resign()
			return err
		}
		if leader {
			// Maintenance mode (ojs-admin-api.md 12.1) holds the triggers. When it ends, each schedule
			// fires its latest missed occurrence once, as after any time without a leader.
			h := c.maintenanceHeld(ctx)
			if h != held {
				c.cfg.Logger.Info("pronto: cron: maintenance mode holds the triggers", "held", h)
				held = h
			}
			if h {
				c.cronHeld.Add(1)
			} else {
				c.fireDueCrons(ctx, cs, cfg)
			}
		}
		select {
		case <-ctx.Done():
			// Resign even when the last election's answer was lost to the cancellation: the row may
			// be ours, and a resign names our id, so it never releases another client's.
			resign()
			return nil
		case <-elect.C:
			doElect()
			continue
		case <-tick.C:
		}
	}
}

func (c *Client) fireDueCrons(ctx context.Context, cs store.CronStore, cfg *CronConfig) {
	// One reading of the store's clock judges the whole pass: what is due, and each schedule's next
	// occurrence after it.
	now, err := c.cronNow(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.cfg.Logger.Warn("pronto: cron: reading the store's clock failed", "err", err)
		}
		return
	}
	due, err := cs.CronDue(ctx, now, 100)
	if err != nil {
		if ctx.Err() == nil {
			c.cfg.Logger.Warn("pronto: cron: reading due schedules failed", "err", err)
		}
		return
	}
	for _, s := range due {
		if ctx.Err() != nil {
			return
		}
		fctx, end := ctx, func(int, error) {}
		if c.cfg.SystemHook != nil {
			fctx, end = c.cfg.SystemHook(ctx, SystemPass{Op: SystemOpCronTrigger, Name: s.Name})
		}
		err := c.fireCron(fctx, cs, s, cfg, now)
		end(0, err)
		if err != nil && ctx.Err() == nil {
			c.cfg.Logger.Warn("pronto: cron: firing failed; retrying on the next tick", "cron", s.Name, "err", err)
		}
	}
}

// storeClock is implemented by the stores that several processes share (PostgreSQL's now(), Redis's
// TIME): cron reads the store's clock to judge which occurrences are due and to compute the next
// one, so that a process whose own clock is off (a VM resumed from suspend, a container with a
// bad clock) neither fires occurrences early or late by its error nor registers a schedule
// starting from the wrong time. The other stores are one host, one clock: they need no method.
type storeClock interface {
	// StoreNow returns the store's current time.
	StoreNow(ctx context.Context) (time.Time, error)
}

// cronNow is the time by which cron judges its schedules: the store's clock when it has one every
// process shares, else this process's.
func (c *Client) cronNow(ctx context.Context) (time.Time, error) {
	if sc, ok := c.store.(storeClock); ok {
		now, err := sc.StoreNow(ctx)
		if err != nil {
			return time.Time{}, fmt.Errorf("read the store's clock: %w", err)
		}
		return now.UTC(), nil
	}
	return c.wallNow(), nil
}

// processClock is this process's clock (time.Now); a test can put it off for one client
// (export_clockskew_test.go) to play a process whose machine's clock is wrong.
var processClock skewclock.Clock[*Client]

// wallNow is this process's clock, as a test may have put it off (processClock).
func (c *Client) wallNow() time.Time { return processClock.Now(c) }

// fireCron handles one due occurrence of s, now being the store's time of the pass (cronNow).
func (c *Client) fireCron(ctx context.Context, cs store.CronStore, s *store.CronSchedule, cfg *CronConfig, now time.Time) error {
	at := s.NextRunAt
	// last_run_at is the latest occurrence that inserted a job: an advance without one keeps it.
	adv := store.CronAdvance{Name: s.Name, ID: s.ID, From: at, RunAt: s.LastRunAt}
	sched, err := ParseCron(s.Expression, s.Timezone)
	if err != nil {
		// Registered schedules were valid; one that is not any more is parked for an hour, loudly.
		adv.Next = now.Add(time.Hour).UTC()
		_, aerr := cs.CronAdvance(ctx, adv)
		return errors.Join(err, aerr)
	}
	// At most one catch-up occurrence: the next one is computed from now, not from the missed one.
	adv.Next = sched.Next(now)
	jobID := cronJobID(s.ID, at)

	// This occurrence's job may exist already (a leader inserted it and stopped before advancing).
	if _, err := c.store.GetJob(ctx, jobID); err == nil {
		adv.JobID, adv.RunAt = jobID, at
		_, err := cs.CronAdvance(ctx, adv)
		return err
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}

	// After a time without a leader (or in maintenance mode) several occurrences may be past: the
	// latest of them is the one that fires. The schedule is first moved to it, guarded as any
	// advance, so that leaders whose clocks differ cannot fire two different ones: the one whose
	// move applies fixes the occurrence, and every leader then fires that one, with its job id.
	if latest := latestOccurrence(sched, at, now); latest.After(at) {
		ok, err := cs.CronAdvance(ctx, store.CronAdvance{Name: s.Name, ID: s.ID, From: at, Next: latest, RunAt: s.LastRunAt})
		if err != nil || !ok {
			return err // !ok: another leader moved it, or it was deleted: the next tick reads it again
		}
		at = latest
		adv.From = at
		jobID = cronJobID(s.ID, at)
	}
	fire := CronFire{Name: s.Name, Expression: s.Expression, ScheduledAt: at}

	// Still this occurrence's to fire? A leader that stalled since it read s (past its leadership)
	// finds that another leader fired or skipped it, or that it was paused or deleted meanwhile, and
	// does nothing. The read comes just before the overlap decision and the insert, so what remains
	// is a stall of this process between them (and the job id is the occurrence's: a second insert
	// while the first job exists is refused as a duplicate).
	if cur, err := cs.CronGet(ctx, s.Name); errors.Is(err, store.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	} else if cur.ID != s.ID || !cur.Enabled || !cur.NextRunAt.Equal(at) {
		return nil
	}

	var t cronTemplate
	if err := json.Unmarshal(s.Template, &t); err != nil {
		adv.Next = now.Add(time.Hour).UTC()
		_, aerr := cs.CronAdvance(ctx, adv)
		return errors.Join(fmt.Errorf("unreadable job template: %w", err), aerr)
	}
	fire.Kind, fire.Queue = t.Kind, cmp.Or(t.Queue, DefaultQueue)

	policy := CronOverlapPolicy(s.OverlapPolicy)
	if s.LastJobID != "" && (policy == CronSkip || policy == "" || policy == CronCancelPrevious) {
		prev, err := c.store.GetJob(ctx, s.LastJobID)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return err
		case !prev.State.Terminal() && policy == CronCancelPrevious:
			if _, err := c.JobCancel(ctx, prev.ID); err != nil && !errors.Is(err, ErrInvalidTransition) && !errors.Is(err, ErrNotFound) {
				return err
			}
		case !prev.State.Terminal():
			ok, err := cs.CronAdvance(ctx, adv)
			if err == nil && ok && cfg.OnFire != nil {
				fire.Skipped, fire.SkipReason, fire.PreviousJobID = true, CronSkipOverlap, prev.ID
				cfg.OnFire(fire)
			}
			return err
		}
	}

	meta := map[string]any{}
	if len(t.Meta) > 0 {
		if meta, err = decodeMeta(t.Meta); err != nil || meta == nil {
			meta = map[string]any{}
		}
	}
	meta["cron_name"] = s.Name
	meta["cron_triggered_at"] = at.UTC().Format(time.RFC3339)
	p, err := c.resolveOJS(OJSJob{Kind: t.Kind, Args: t.Args, Opts: InsertOpts{
		ID: jobID, Queue: t.Queue, Priority: t.Priority, MaxAttempts: t.MaxAttempts, RetryPolicy: t.Retry,
		Timeout: time.Duration(t.TimeoutMS) * time.Millisecond, Tags: t.Tags, Meta: meta,
		Unique: t.Unique, RateKey: t.RateKey, RateLimit: t.RateLimit, Tenant: t.Tenant,
	}})
	if err != nil {
		adv.Next = now.Add(time.Hour).UTC()
		_, aerr := cs.CronAdvance(ctx, adv)
		return errors.Join(err, aerr)
	}
	if cfg.BeforeInsert != nil {
		defer cfg.BeforeInsert(jobID)()
	}
	rows, err := c.insert(ctx, []*store.InsertParams{p}, c.store.Insert)
	switch {
	case errors.Is(err, ErrUniqueConflict):
		// The template's unique policy refused this occurrence: it is skipped, like an overlap.
		fire.Skipped, fire.SkipReason = true, CronSkipUnique
		var uc *UniqueConflictError
		if errors.As(err, &uc) {
			fire.PreviousJobID = uc.ExistingID
		}
		if ok, aerr := cs.CronAdvance(ctx, adv); aerr == nil && ok && cfg.OnFire != nil {
			cfg.OnFire(fire)
		} else if aerr != nil {
			return aerr
		}
		return nil
	case err != nil && !errors.Is(err, ErrDuplicate):
		return err
	}
	adv.JobID, adv.RunAt = jobID, at
	ok, err := cs.CronAdvance(ctx, adv)
	if err == nil && ok && len(rows) == 1 && cfg.OnFire != nil {
		fire.Job = rows[0]
		cfg.OnFire(fire)
	}
	return err
}

// latestOccurrence returns the latest occurrence of sched at or before now, from the occurrence
// from (at or before now). It is a function of from and now alone: an "@every" schedule counts its
// interval on from; any other lists the same times from any start, so the search may start late.
func latestOccurrence(sched CronSchedule, from, now time.Time) time.Time {
	if every, ok := sched.sched.(cron.ConstantDelaySchedule); ok {
		if n := now.Sub(from) / every.Delay; n > 0 {
			return from.Add(n * every.Delay)
		}
		return from
	}
	// Start at the first occurrence of the shortest window back from now (doubling) that holds
	// one, rather than walk from an occurrence perhaps months old one second at a time: the walk
	// below then covers at most the window's older half and the occurrences after it.
	at := from
	for w := time.Second; now.Add(-w).After(from); w *= 2 {
		if n := sched.Next(now.Add(-w)); !n.IsZero() && !n.After(now) {
			at = n
			break
		}
	}
	for {
		n := sched.Next(at)
		if n.IsZero() || n.After(now) {
			return at
		}
		at = n
	}
}

// cronJobID is the id of the job of the occurrence at of registration regID: a UUIDv7 whose time is
// the occurrence's and whose other bits are a hash of both, so every leader computes the same one.
func cronJobID(regID string, at time.Time) string {
	h := sha256.Sum256([]byte(regID + "|" + at.UTC().Format(time.RFC3339Nano)))
	var b [16]byte
	ms := at.UnixMilli()
	for i := 0; i < 6; i++ {
		b[i] = byte(ms >> (40 - 8*i))
	}
	copy(b[6:], h[:10])
	b[6] = 0x70 | b[6]&0x0f
	b[8] = 0x80 | b[8]&0x3f
	return uuidv7.Format(b)
}

// dowNames are the day-of-week names the parser knows, by number.
var dowNames = map[string]int{"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}

// sundayAsSeven rewrites the day-of-week field of a 5- or 6-field expression so that 7 means
// Sunday, as 0 does (OJS cron 3.1 and 3.4; Vixie cron): robfig's parser knows 0-6 only. A range or
// value that reaches 7 ("7", "5-7", "1-7/2", "fri-7", and "fri-sun", which would otherwise run
// backwards) becomes the list of its days; anything else, including what is not valid, is left for
// the parser to accept or refuse.
func sundayAsSeven(expr string) string {
	f := strings.Fields(expr)
	if len(f) != 5 && len(f) != 6 {
		return expr
	}
	items := strings.Split(f[len(f)-1], ",")
	changed := false
	for i, item := range items {
		if days, ok := expandSeven(item); ok {
			items[i], changed = days, true
		}
	}
	if !changed {
		return expr
	}
	f[len(f)-1] = strings.Join(items, ",")
	return strings.Join(f, " ")
}

// expandSeven returns one day-of-week list item that reaches 7 as the days it names, Sunday as 0.
func expandSeven(item string) (string, bool) {
	rng, stepText, stepped := strings.Cut(item, "/")
	step := 1
	if stepped {
		n, err := strconv.Atoi(stepText)
		if err != nil || n <= 0 {
			return "", false
		}
		step = n
	}
	loText, hiText, isRange := strings.Cut(rng, "-")
	day := func(s string, end bool) (int, bool) {
		if n, ok := dowNames[strings.ToLower(s)]; ok {
			if n == 0 && end {
				n = 7 // "fri-sun": Sunday ends the week
			}
			return n, true
		}
		n, err := strconv.Atoi(s)
		return n, err == nil && n >= 0 && n <= 7
	}
	lo, ok := day(loText, false)
	if !ok {
		return "", false
	}
	hi := lo
	if isRange {
		if hi, ok = day(hiText, true); !ok || hi < lo {
			return "", false
		}
	} else if stepped {
		return "", false // "7/2": no range for the step to walk; the parser refuses it
	}
	if hi != 7 {
		return "", false
	}
	var days []string
	for d := lo; d <= hi; d += step {
		days = append(days, strconv.Itoa(d%7))
	}
	return strings.Join(days, ","), true
}
