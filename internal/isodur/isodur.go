// Package isodur parses and formats the ISO 8601 durations OJS uses for retry intervals and relative
// schedules ("PT1S", "PT5M", "P1DT2H", "PT0.5S").
package isodur

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Parse reads an ISO 8601 duration of days, hours, minutes and (fractional) seconds. Years, months and
// weeks are refused: their length is not fixed. The value is exact to the nanosecond (a fraction
// beyond it is rounded, half away from zero), over the whole range of time.Duration.
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
	// The magnitude is summed in uint64 nanoseconds: a negative duration may reach 2^63.
	limit := uint64(math.MaxInt64)
	if neg {
		limit++
	}
	var total uint64
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
		num := s[:i]
		unit := s[i]
		s = s[i+1:]
		var mult uint64
		switch {
		case !inTime && unit == 'D':
			mult = uint64(24 * time.Hour)
		case !inTime && (unit == 'Y' || unit == 'M' || unit == 'W'):
			return 0, fmt.Errorf("invalid ISO 8601 duration %q: years, months and weeks are not supported", orig)
		case inTime && unit == 'H':
			mult = uint64(time.Hour)
		case inTime && unit == 'M':
			mult = uint64(time.Minute)
		case inTime && unit == 'S':
			mult = uint64(time.Second)
		default:
			return 0, fmt.Errorf("invalid ISO 8601 duration %q: unexpected %q", orig, unit)
		}
		n, err := component(num, mult, limit)
		if err != nil {
			return 0, fmt.Errorf("invalid ISO 8601 duration %q: %v", orig, err)
		}
		if total > limit-n {
			return 0, fmt.Errorf("invalid ISO 8601 duration %q: too long", orig)
		}
		total += n
		seen = true
	}
	if !seen {
		return 0, fmt.Errorf("invalid ISO 8601 duration %q: no components", orig)
	}
	if neg {
		return time.Duration(-total), nil // two's complement: 2^63 becomes math.MinInt64
	}
	return time.Duration(total), nil
}

// errTooLong is a component beyond limit.
var errTooLong = errors.New("too long")

// component returns num (digits with at most one '.' or ',' and at least one digit) times mult
// nanoseconds (a whole number of seconds), rounded to the nanosecond half away from zero, or an
// error when it is malformed or above limit. Integer arithmetic throughout: a float64 holds only
// 2^53 ns exactly (104 days), so a longer duration with odd nanoseconds did not read back as
// written.
func component(num string, mult, limit uint64) (uint64, error) {
	whole, frac := num, ""
	if k := strings.IndexAny(num, ".,"); k >= 0 {
		whole, frac = num[:k], num[k+1:]
	}
	if strings.ContainsAny(frac, ".,") || (whole == "" && frac == "") {
		return 0, fmt.Errorf("malformed number %q", num)
	}
	var n uint64
	if whole = strings.TrimLeft(whole, "0"); whole != "" {
		w, err := strconv.ParseUint(whole, 10, 64)
		if err != nil {
			return 0, errTooLong // only digits reach here: a range error
		}
		var hi uint64
		if hi, n = bits.Mul64(w, mult); hi != 0 || n > limit {
			return 0, errTooLong
		}
	}
	if frac == "" {
		return n, nil
	}
	// 0.frac × secs seconds is secs × (its first 9 digits) ns plus secs × 0.rest ns; the latter is
	// worked out digit by digit (rest may be any length), its carry the whole nanoseconds and its
	// first digit the rounding.
	secs := mult / uint64(time.Second)
	f9 := frac
	if len(f9) > 9 {
		f9 = f9[:9]
	}
	var ns uint64
	for i := range 9 {
		ns *= 10
		if i < len(f9) {
			ns += uint64(f9[i] - '0')
		}
	}
	ns *= secs
	if len(frac) > 9 {
		rest := frac[9:]
		var carry, first uint64
		for i := len(rest) - 1; i >= 0; i-- {
			v := uint64(rest[i]-'0')*secs + carry
			first, carry = v%10, v/10
		}
		ns += carry
		if first >= 5 {
			ns++
		}
	}
	if n > limit-ns {
		return 0, errTooLong
	}
	return n + ns, nil
}

// Format writes d as an ISO 8601 duration such as "PT1S", "PT1M30S", "PT0.25S" or "P1DT2H", which
// Parse reads back as d exactly.
func Format(d time.Duration) string {
	if d == 0 {
		return "PT0S"
	}
	var b strings.Builder
	// The magnitude in uint64: -math.MinInt64 does not fit a Duration.
	u := uint64(d)
	if d < 0 {
		b.WriteByte('-')
		u = -u
	}
	b.WriteByte('P')
	const day, hour, minute, second = uint64(24 * time.Hour), uint64(time.Hour), uint64(time.Minute), uint64(time.Second)
	if days := u / day; days > 0 {
		fmt.Fprintf(&b, "%dD", days)
	}
	u %= day
	if u == 0 {
		return b.String()
	}
	b.WriteByte('T')
	if h := u / hour; h > 0 {
		fmt.Fprintf(&b, "%dH", h)
	}
	u %= hour
	if m := u / minute; m > 0 {
		fmt.Fprintf(&b, "%dM", m)
	}
	u %= minute
	if u > 0 {
		b.WriteString(strconv.FormatUint(u/second, 10))
		if ns := u % second; ns > 0 {
			frac := fmt.Sprintf("%09d", ns)
			b.WriteByte('.')
			b.WriteString(strings.TrimRight(frac, "0"))
		}
		b.WriteByte('S')
	}
	return b.String()
}
