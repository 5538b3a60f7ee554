package pronto_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

// fuzzCronZones are the timezones FuzzParseCron picks from (by index), besides the fuzzed one: UTC,
// zones with a daylight saving change of an hour and of 30 minutes, and one without.
var fuzzCronZones = []string{"", "UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kolkata"}

// FuzzParseCron: ParseCron never panics; a refusal matches ErrInvalidArgs with a message; an
// accepted schedule has a next occurrence strictly after any instant, and, for an expression of
// plain numbers, ranges, steps and lists in UTC, that occurrence matches every field and no minute
// before it in the next two days does.
func FuzzParseCron(f *testing.F) {
	for _, s := range []string{"*/5 * * * *", "0 0 30 2 *", "0 9 * * 1-5", "30 2 * * *", "0 0 1,15 * 5", "@every 90s",
		"@hourly", "0 */2 * * *", "5 4 * * 7", "0 0 * * fri-sun", "1,,5 * * * *", "*/0 * * * *", "0 0 29 2 *",
		"15 10 * * * *", "59 23 31 12 *", "0-59/7 0-23/5 1-31/3 1-12/2 0-7/3", "TZ=UTC 0 0 * * *"} {
		f.Add(s, uint8(0), "", int64(1767225600))
	}
	f.Add("30 2 * * *", uint8(2), "", int64(1772928000))
	f.Add("0 * * * *", uint8(99), "Europe/Paris", int64(0))
	f.Fuzz(func(t *testing.T, expr string, zone uint8, tz string, at int64) {
		if int(zone) < len(fuzzCronZones) {
			tz = fuzzCronZones[zone]
		}
		s, err := pronto.ParseCron(expr, tz)
		if err != nil {
			if !errors.Is(err, pronto.ErrInvalidArgs) || err.Error() == "" {
				t.Fatalf("ParseCron(%q, %q): %v", expr, tz, err)
			}
			return
		}
		// Any instant from 1970 to about 2200.
		t0 := time.Unix(int64(uint64(at)%(230*365*86400)), 0).UTC()
		n := s.Next(t0)
		if n.IsZero() {
			return // a date that exists only in some years (February 29th on a Monday): may run out
		}
		if !n.After(t0) {
			t.Fatalf("ParseCron(%q, %q).Next(%v) = %v, not after", expr, tz, t0, n)
		}
		if tz != "" && tz != "UTC" {
			return
		}
		m, ok := parseSimpleCron(expr)
		if !ok {
			return
		}
		if !m.matches(n) {
			t.Fatalf("%q: Next(%v) = %v, which the expression does not name", expr, t0, n)
		}
		end := t0.Add(48 * time.Hour)
		if n.Before(end) {
			end = n
		}
		for c := t0.Truncate(time.Minute).Add(time.Minute); c.Before(end); c = c.Add(time.Minute) {
			if m.matches(c) {
				t.Fatalf("%q: Next(%v) = %v, but %v matches before it", expr, t0, n, c)
			}
		}
	})
}

// simpleCron is a five-field expression of numbers read the standard way, as a reference.
type simpleCron struct {
	fields           [5]map[int]bool
	domStar, dowStar bool
}

// parseSimpleCron reads five fields of "*", n, a-b, */s and a-b/s items; ok is false for anything
// else (names, descriptors, six fields, "*/s" in a day field, which cron daemons read differently).
func parseSimpleCron(expr string) (simpleCron, bool) {
	var c simpleCron
	f := strings.Fields(expr)
	if len(f) != 5 {
		return c, false
	}
	bounds := [5][2]int{{0, 59}, {0, 23}, {1, 31}, {1, 12}, {0, 7}}
	for k, field := range f {
		set := map[int]bool{}
		if k == 2 || k == 4 {
			if field == "*" {
				if k == 2 {
					c.domStar = true
				} else {
					c.dowStar = true
				}
			} else if strings.HasPrefix(field, "*") {
				return c, false
			}
		}
		for _, item := range strings.Split(field, ",") {
			rng, stepText, stepped := strings.Cut(item, "/")
			step := 1
			if stepped {
				n, err := strconv.Atoi(stepText)
				if err != nil || n <= 0 || stepText[0] == '+' {
					return c, false
				}
				step = n
			}
			lo, hi := bounds[k][0], bounds[k][1]
			if rng != "*" {
				a, b, isRange := strings.Cut(rng, "-")
				if !isRange && stepped {
					return c, false
				}
				if !isRange {
					b = a
				}
				var err1, err2 error
				lo, err1 = strconv.Atoi(a)
				hi, err2 = strconv.Atoi(b)
				if err1 != nil || err2 != nil || a[0] == '+' || b[0] == '+' || a[0] == '-' || lo < bounds[k][0] || hi > bounds[k][1] || lo > hi {
					return c, false
				}
			}
			for v := lo; v <= hi; v += step {
				set[v] = true
			}
		}
		c.fields[k] = set
	}
	if c.fields[4][7] {
		c.fields[4][0] = true
	}
	return c, true
}

func (c simpleCron) matches(t time.Time) bool {
	if t.Second() != 0 || !c.fields[0][t.Minute()] || !c.fields[1][t.Hour()] || !c.fields[3][int(t.Month())] {
		return false
	}
	dom, dow := c.fields[2][t.Day()], c.fields[4][int(t.Weekday())]
	if c.domStar || c.dowStar {
		return dom && dow
	}
	return dom || dow
}
