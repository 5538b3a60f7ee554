package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

// TestErrorTexts: every message names its subject once, in the user's terms.
func TestErrorTexts(t *testing.T) {
	db := []string{"--database-url", "memory:"}
	const id = "0190d4b2-6c1e-7f3a-9b2c-4d5e6f708192"
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"jobs", "cancel", id}, ExitNotFound, "pronto: job " + id + " not found\n"},
		{[]string{"rate-limits", "set", "other2", "--rate", "10"}, ExitUsage,
			"pronto: rate-limits set: --rate and --period go together: give both (for example --rate 10 --period 1s) or neither\n"},
		{[]string{"rate-limits", "set", "k"}, ExitUsage, "no bound given: use --max-active N, or --rate N with --period DURATION"},
		{[]string{"rate-limits", "set", "k", "--max-active", "1", "--on-limit", "later"}, ExitUsage, `--on-limit "later": must be wait, reschedule or drop`},
		{[]string{"enqueue", "a.b", "--delay", "5"}, ExitUsage,
			`pronto: enqueue: invalid value "5" for flag --delay: a duration needs a unit: ms, s, m or h, for example 5s or 1m30s`},
		{[]string{"enqueue", "a.b", "--timeout", "soon"}, ExitUsage, "use a number with a unit (ms, s, m or h)"},
	} {
		res := run(t, with(db, c.args...)...).fails(t, c.code, c.want)
		for _, bad := range []string{"pronto: pronto:", "invalid job:"} {
			if strings.Contains(res.stderr, bad) {
				t.Errorf("%q in:\n%s", bad, res)
			}
		}
	}
}

// TestLibraryErrorsAreNotPrefixedTwice: an error of the pronto package ("pronto: ...") is printed
// with one "pronto: ".
func TestLibraryErrorsAreNotPrefixedTwice(t *testing.T) {
	var stderr bytes.Buffer
	r := &runner{env: Env{Stderr: &stderr}}
	code := r.report(errorf("%v", pronto.ErrClientStopped))
	if code != ExitError || stderr.String() != "pronto: client is stopped\n" {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	stderr.Reset()
	r.report(pronto.ErrJobLost)
	if stderr.String() != "pronto: job lease lost\n" {
		t.Fatalf("stderr %q", stderr.String())
	}
}

// TestPanicInErrorHistory: a panic's entry reads "[panic]: kaboom", not "[panic]: panic: kaboom".
func TestPanicInErrorHistory(t *testing.T) {
	var out bytes.Buffer
	now := time.Now()
	printJob(&out, &pronto.JobRow{ID: "x", State: pronto.StateRetryable, Errors: []pronto.AttemptError{
		{Attempt: 1, At: now, Type: "panic", Message: "panic: kaboom"},
		{Attempt: 2, At: now, Type: "net.OpError", Message: "dial tcp: refused"},
	}}, now)
	for _, want := range []string{"[panic]: kaboom\n", "[net.OpError]: dial tcp: refused\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "panic: panic") {
		t.Errorf("doubled:\n%s", out.String())
	}
}

// TestAttemptStartInErrorHistory: an entry that knows its attempt's start shows the start, the
// failure and the run time; an old entry without it shows the failure alone.
func TestAttemptStartInErrorHistory(t *testing.T) {
	var out bytes.Buffer
	at := time.Date(2026, 1, 2, 3, 4, 5, 250_000_000, time.Local)
	printJob(&out, &pronto.JobRow{ID: "x", State: pronto.StateRetryable, Errors: []pronto.AttemptError{
		{Attempt: 1, At: at, Message: "old entry"},
		{Attempt: 2, StartedAt: at.Add(-1500 * time.Millisecond), At: at, Message: "refused"},
	}}, at)
	for _, want := range []string{
		"  attempt 1, 2026-01-02 03:04:05.250: old entry\n",
		"  attempt 2, started 2026-01-02 03:04:03.750, failed 2026-01-02 03:04:05.250 after 1.5s: refused\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("lacks %q:\n%s", want, out.String())
		}
	}
}
