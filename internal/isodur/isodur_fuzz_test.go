package isodur

import (
	"math"
	"strings"
	"testing"
	"time"
)

// FuzzParse: Parse never panics; every error names ISO 8601; a duration it accepts formats back to
// text that parses to the same duration; and the parsed value is exactly what the text says, to the
// nanosecond (checked against an exact integer reading for the common form of whole units).
func FuzzParse(f *testing.F) {
	for _, s := range []string{"PT1S", "PT0.5S", "P1DT2H", "-PT2S", "PT0,25S", "P106751DT23H47M16.854775807S",
		"PT1H30M15.000000001S", "P1Y", "PT", "PT1.5H", "P104DT0.000000001S", "PT9223372036.854775807S"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := Parse(s)
		if err != nil {
			if !strings.Contains(err.Error(), "ISO 8601") {
				t.Fatalf("Parse(%q): error %q does not name ISO 8601", s, err)
			}
			return
		}
		back, err := Parse(Format(d))
		if err != nil || back != d {
			t.Fatalf("Parse(%q) = %v; Format = %q parses as %v, %v", s, d, Format(d), back, err)
		}
		if want, ok := exactWholeUnits(s); ok && want != d {
			t.Fatalf("Parse(%q) = %d ns, the text says %d ns", s, int64(d), int64(want))
		}
	})
}

// FuzzFormat: every Duration formats to text that Parse reads back as the same Duration.
func FuzzFormat(f *testing.F) {
	for _, n := range []int64{0, 1, -1, int64(time.Second), 26 * int64(time.Hour), math.MaxInt64, math.MinInt64 + 1, math.MinInt64,
		104*24*int64(time.Hour) + 1, 1<<53 + 1} {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, n int64) {
		d := time.Duration(n)
		s := Format(d)
		back, err := Parse(s)
		if err != nil || back != d {
			t.Fatalf("Format(%d) = %q, which parses as %d, %v", n, s, int64(back), err)
		}
	})
}

// exactWholeUnits reads s with integer arithmetic when it is of the form Format writes ("-"?
// "P" [nD] ["T" [nH] [nM] [n[.f]S]], each unit once and in order, fraction on seconds only) and
// fits: the reference Parse must agree with to the nanosecond.
func exactWholeUnits(s string) (time.Duration, bool) {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	if !strings.HasPrefix(s, "P") {
		return 0, false
	}
	s = s[1:]
	var total big
	units := []struct {
		c  byte
		ns int64
		t  bool
	}{{'D', 24 * int64(time.Hour), false}, {'H', int64(time.Hour), true}, {'M', int64(time.Minute), true}, {'S', int64(time.Second), true}}
	inT := false
	for _, u := range units {
		if u.t && !inT {
			if !strings.HasPrefix(s, "T") {
				if s == "" {
					break
				}
				return 0, false
			}
			s, inT = s[1:], true
		}
		i := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		whole := s[:i]
		frac := ""
		if u.c == 'S' && i < len(s) && (s[i] == '.' || s[i] == ',') {
			j := i + 1
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			frac, i = s[i+1:j], j
			if frac == "" || whole == "" || len(frac) > 9 {
				return 0, false // not a form Format writes, or beyond nanoseconds (rounding)
			}
		}
		if i == len(s) || s[i] != u.c {
			if whole == "" && frac == "" {
				continue // unit absent
			}
			return 0, false
		}
		if whole == "" || len(whole) > 12 {
			return 0, false
		}
		total.add(whole, u.ns)
		if frac != "" {
			total.add(frac+strings.Repeat("0", 9-len(frac)), 1)
		}
		s = s[i+1:]
	}
	if s != "" || total.over {
		return 0, false
	}
	if neg {
		return -time.Duration(total.n), true
	}
	return time.Duration(total.n), true
}

// big sums digits × unit in int64, noting overflow.
type big struct {
	n    int64
	over bool
}

func (b *big) add(digits string, unit int64) {
	var v int64
	for _, c := range digits {
		v = v*10 + int64(c-'0')
	}
	if v != 0 && unit > math.MaxInt64/v {
		b.over = true
		return
	}
	if b.n > math.MaxInt64-v*unit {
		b.over = true
		return
	}
	b.n += v * unit
}
