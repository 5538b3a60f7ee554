// Package isodur parses and formats the ISO 8601 durations OJS uses for retry intervals and relative
// schedules ("PT1S", "PT5M", "P1DT2H", "PT0.5S").
package isodur

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Parse reads an ISO 8601 duration of days, hours, minutes and (fractional) seconds. Years, months and
// weeks are refused: their length is not fixed.
func Parse(s string) (time.Duration, error) {
	orig := s
	if s == "" {
		return 0, fmt.Errorf("invalid ISO 8601 duration %q: empty", orig)
	}
	neg := false
	if s[0] == '-' {
		neg = true
		s = s[1:]
	}
	if len(s) < 2 || s[0] != 'P' {
		return 0, fmt.Errorf("invalid ISO 8601 duration %q: must start with P", orig)
	}
	s = s[1:]
	var total float64
	inTime := false
	seen := false
	for len(s) > 0 {
		if s[0] == 'T' {
			if inTime {
				return 0, fmt.Errorf("invalid ISO 8601 duration %q: repeated T", orig)
			}
			inTime = true
			s = s[1:]
			if s == "" {
				return 0, fmt.Errorf("invalid ISO 8601 duration %q: nothing after T", orig)
			}
			continue
		}
		i := 0
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.' || s[i] == ',') {
			i++
		}
		if i == 0 || i == len(s) {
			return 0, fmt.Errorf("invalid ISO 8601 duration %q", orig)
		}
		n, err := strconv.ParseFloat(strings.ReplaceAll(s[:i], ",", "."), 64)
		if err != nil {
			return 0, fmt.Errorf("invalid ISO 8601 duration %q: %v", orig, err)
		}
		unit := s[i]
		s = s[i+1:]
		var mult float64
		switch {
		case !inTime && unit == 'D':
			mult = 24 * 3600
		case !inTime && (unit == 'Y' || unit == 'M' || unit == 'W'):
			return 0, fmt.Errorf("invalid ISO 8601 duration %q: years, months and weeks are not supported", orig)
		case inTime && unit == 'H':
			mult = 3600
		case inTime && unit == 'M':
			mult = 60
		case inTime && unit == 'S':
			mult = 1
		default:
			return 0, fmt.Errorf("invalid ISO 8601 duration %q: unexpected %q", orig, unit)
		}
		total += n * mult
		seen = true
	}
	if !seen {
		return 0, fmt.Errorf("invalid ISO 8601 duration %q: no components", orig)
	}
	// float64(math.MaxInt64) is 2^63, one past the largest Duration: a total that rounds to it
	// would convert to a negative one.
	if total*1e9 >= math.MaxInt64 {
		return 0, fmt.Errorf("invalid ISO 8601 duration %q: too long", orig)
	}
	d := time.Duration(math.Round(total * 1e9))
	if neg {
		d = -d
	}
	return d, nil
}

// Format writes d as an ISO 8601 duration such as "PT1S", "PT1M30S", "PT0.25S" or "P1DT2H".
func Format(d time.Duration) string {
	if d == 0 {
		return "PT0S"
	}
	var b strings.Builder
	if d < 0 {
		b.WriteByte('-')
		d = -d
	}
	b.WriteByte('P')
	days := d / (24 * time.Hour)
	d -= days * 24 * time.Hour
	if days > 0 {
		fmt.Fprintf(&b, "%dD", days)
	}
	if d == 0 {
		return b.String()
	}
	b.WriteByte('T')
	h := d / time.Hour
	d -= h * time.Hour
	m := d / time.Minute
	d -= m * time.Minute
	if h > 0 {
		fmt.Fprintf(&b, "%dH", h)
	}
	if m > 0 {
		fmt.Fprintf(&b, "%dM", m)
	}
	if d > 0 {
		b.WriteString(strconv.FormatFloat(d.Seconds(), 'f', -1, 64))
		b.WriteByte('S')
	}
	return b.String()
}
