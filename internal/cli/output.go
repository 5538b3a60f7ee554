package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/isodur"
)

// jobJSON is the JSON form of a job printed by --json: the OJS job model's fields, with the kind under
// "kind" as everywhere in the CLI, timestamps in RFC 3339 and absent when unset.
type jobJSON struct {
	ID             string                `json:"id"`
	Kind           string                `json:"kind"`
	Queue          string                `json:"queue"`
	State          pronto.State          `json:"state"`
	Args           json.RawMessage       `json:"args"`
	Meta           json.RawMessage       `json:"meta,omitempty"`
	Priority       int                   `json:"priority"`
	Attempt        int                   `json:"attempt"`
	MaxAttempts    int                   `json:"max_attempts"`
	Errors         []pronto.AttemptError `json:"errors"`
	Result         json.RawMessage       `json:"result,omitempty"`
	Tags           []string              `json:"tags,omitempty"`
	Tenant         string                `json:"tenant,omitempty"`
	RetryPolicy    json.RawMessage       `json:"retry_policy,omitempty"`
	Timeout        string                `json:"timeout,omitempty"`
	CreatedAt      *time.Time            `json:"created_at,omitempty"`
	ScheduledAt    *time.Time            `json:"scheduled_at,omitempty"`
	StartedAt      *time.Time            `json:"started_at,omitempty"`
	CompletedAt    *time.Time            `json:"completed_at,omitempty"`
	ExpiresAt      *time.Time            `json:"expires_at,omitempty"`
	LeaseExpiresAt *time.Time            `json:"lease_expires_at,omitempty"`
	WorkerID       string                `json:"worker_id,omitempty"`
	Progress       *jobProgressJSON      `json:"progress,omitempty"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// toJSON converts a job to its printed JSON form.
func toJSON(j *pronto.JobRow) *jobJSON {
	out := &jobJSON{
		ID: j.ID, Kind: j.Kind, Queue: j.Queue, State: j.State, Args: j.Args, Meta: j.Meta,
		Priority: j.Priority, Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, Errors: j.Errors,
		Result: j.Result, Tags: j.Tags, Tenant: j.Tenant, RetryPolicy: j.RetryPolicy,
		CreatedAt: timePtr(j.CreatedAt), ScheduledAt: timePtr(j.ScheduledAt), StartedAt: timePtr(j.StartedAt),
		CompletedAt: timePtr(j.CompletedAt), ExpiresAt: timePtr(j.ExpiresAt),
		LeaseExpiresAt: timePtr(j.LeaseExpiresAt), WorkerID: j.WorkerID, Progress: progressJSON(j.Progress),
	}
	if len(out.Args) == 0 {
		out.Args = json.RawMessage("[]")
	}
	if out.Errors == nil {
		out.Errors = []pronto.AttemptError{}
	}
	if j.Timeout > 0 {
		out.Timeout = isodur.Format(j.Timeout)
	}
	return out
}

// writeList prints a list command's --json output, one shape for every list: an object with the
// items under key and the cursor of the next page under "next" ("" on the last page, and always for
// the lists that have one page).
func writeList[T any](w io.Writer, key string, items []T, next string) error {
	if items == nil {
		items = []T{}
	}
	return writeJSON(w, map[string]any{key: items, "next": next})
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// truncate shortens s to at most n runes, on one line.
func truncate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// ago says how long before now t was, compactly ("3s ago", "5m ago", "2h ago", "4d ago").
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	if d < 0 {
		return "in " + compactDuration(-d)
	}
	return compactDuration(d) + " ago"
}

// until says how far in the future t is ("in 3s"), or how long ago it was due.
func until(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := t.Sub(now)
	if d < 0 {
		return "due " + compactDuration(-d) + " ago"
	}
	return "in " + compactDuration(d)
}

func compactDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// formatTime prints a timestamp for humans: local time with the offset, and how long ago.
func formatTime(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%s (%s)", t.Local().Format("2006-01-02 15:04:05.000 -0700"), ago(t, now))
}

// lastError returns the message of a job's latest failed attempt, or "".
func lastError(j *pronto.JobRow) string {
	if len(j.Errors) == 0 {
		return ""
	}
	return j.Errors[len(j.Errors)-1].Message
}

// printJob writes a job in full, one field a line.
func printJob(w io.Writer, j *pronto.JobRow, now time.Time) {
	row := func(k, v string) { fmt.Fprintf(w, "%-13s %s\n", k+":", v) }
	row("ID", j.ID)
	row("Kind", j.Kind)
	row("Queue", j.Queue)
	row("State", string(j.State))
	row("Priority", fmt.Sprint(j.Priority))
	row("Attempt", fmt.Sprintf("%d of %d", j.Attempt, j.MaxAttempts))
	row("Args", compactJSON(j.Args))
	if len(j.Meta) > 0 && string(j.Meta) != "null" {
		row("Meta", compactJSON(j.Meta))
	}
	if len(j.Tags) > 0 {
		row("Tags", strings.Join(j.Tags, ", "))
	}
	if len(j.RetryPolicy) > 0 && string(j.RetryPolicy) != "null" {
		row("Retry policy", compactJSON(j.RetryPolicy))
	}
	if j.Timeout > 0 {
		row("Timeout", j.Timeout.String())
	}
	row("Created", formatTime(j.CreatedAt, now))
	switch j.State {
	case pronto.StateScheduled, pronto.StateRetryable:
		row("Due", fmt.Sprintf("%s (%s)", j.ScheduledAt.Local().Format("2006-01-02 15:04:05.000 -0700"), until(j.ScheduledAt, now)))
	default:
		if !j.ScheduledAt.IsZero() {
			row("Scheduled", formatTime(j.ScheduledAt, now))
		}
	}
	if !j.StartedAt.IsZero() {
		row("Started", formatTime(j.StartedAt, now))
	}
	if !j.CompletedAt.IsZero() {
		row("Finished", formatTime(j.CompletedAt, now))
	}
	if !j.ExpiresAt.IsZero() {
		row("Expires", formatTime(j.ExpiresAt, now))
	}
	if j.State == pronto.StateActive {
		row("Worker", j.WorkerID)
		row("Lease until", formatTime(j.LeaseExpiresAt, now))
	}
	if len(j.Result) > 0 && string(j.Result) != "null" {
		row("Result", compactJSON(j.Result))
	}
	if j.Progress != nil {
		row("Progress", formatProgress(j.Progress, now))
	}
	if len(j.Errors) == 0 {
		return
	}
	fmt.Fprintf(w, "Errors (%d):\n", len(j.Errors))
	for _, e := range j.Errors {
		typ, msg := "", e.Message
		if e.Type != "" {
			// A panic's message is "panic: VALUE"; the type says it already.
			typ, msg = " ["+e.Type+"]", strings.TrimPrefix(msg, e.Type+": ")
		}
		const stamp = "2006-01-02 15:04:05.000"
		if e.StartedAt.IsZero() { // a failure before the attempt started, or an entry older than started_at
			fmt.Fprintf(w, "  attempt %d, %s%s: %s\n", e.Attempt, e.At.Local().Format(stamp), typ, msg)
		} else {
			fmt.Fprintf(w, "  attempt %d, started %s, failed %s after %s%s: %s\n", e.Attempt,
				e.StartedAt.Local().Format(stamp), e.At.Local().Format(stamp), e.At.Sub(e.StartedAt).Round(time.Millisecond), typ, msg)
		}
		if e.Trace != "" {
			for _, line := range strings.Split(strings.TrimRight(e.Trace, "\n"), "\n") {
				fmt.Fprintf(w, "      %s\n", line)
			}
		}
	}
}

// compactJSON prints raw JSON on one line, as given when it does not parse.
func compactJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "null"
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}
