package isodur

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"PT1S": time.Second, "PT5M": 5 * time.Minute, "PT0.5S": 500 * time.Millisecond,
		"P1DT2H": 26 * time.Hour, "PT1H30M15S": time.Hour + 30*time.Minute + 15*time.Second,
		"P2D": 48 * time.Hour, "-PT2S": -2 * time.Second, "PT0,25S": 250 * time.Millisecond,
	} {
		got, err := Parse(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
		back, err := Parse(Format(got))
		require.NoError(t, err)
		require.Equal(t, got, back, "round trip of %s via %s", in, Format(got))
	}
}

func TestParseRejects(t *testing.T) {
	for _, in := range []string{"", "P", "PT", "1S", "PT1", "P1Y", "P1M", "P1W", "PT1X", "PTS", "P1H", "PT1S2"} {
		_, err := Parse(in)
		require.Error(t, err, in)
		require.Contains(t, err.Error(), "ISO 8601", in)
	}
}

// TestParseRefusesDurationsBeyondInt64: each unit's overflow is refused, never wrapped; the
// largest durations themselves are read exactly (they once went through a float64, which made
// 2^63-1 ns round to 2^63).
func TestParseRefusesDurationsBeyondInt64(t *testing.T) {
	for _, in := range []string{
		"PT9223372036.854775808S", "PT9223372037S", "PT153722867.3M", "PT2562048H", "P106752D",
		"P106751DT24H", "PT99999999999999999999999999999999999999S", "-PT9223372036.854775809S",
		"P106751DT23H47M16.854775807S1S", "PT9223372036.8547758075S",
	} {
		d, err := Parse(in)
		require.Error(t, err, "%s parsed as %v", in, d)
		require.Contains(t, err.Error(), "ISO 8601", in)
	}
	d, err := Parse("PT9223372036S") // just under the limit
	require.NoError(t, err)
	require.Equal(t, 9223372036*time.Second, d)
	for in, want := range map[string]time.Duration{
		"PT9223372036.854775807S": math.MaxInt64, "-PT9223372036.854775807S": -math.MaxInt64,
		"-PT9223372036.854775808S": math.MinInt64, "P106751DT23H47M16.854775807S": math.MaxInt64,
		"PT9223372036.8547758074999S": math.MaxInt64,
	} {
		d, err := Parse(in)
		require.NoError(t, err, in)
		require.Equal(t, want, d, in)
	}
}

// TestParseExact: a duration is read to the nanosecond at any length (it went through a float64,
// exact only to 2^53 ns, 104 days: "P104DT0.000000001S" read as 2 ns over), a fraction on any unit
// too, and a fraction beyond nanoseconds rounds half away from zero, however long it is written.
func TestParseExact(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"P104DT0.000000001S":                           104*24*time.Hour + 1,
		"P104DT5H59M59.254740993S":                     9007199254740993,
		"P10000DT0.123456789S":                         10000*24*time.Hour + 123456789,
		"PT0.0000000005S":                              1,
		"-PT0.0000000005S":                             -1,
		"PT0.00000000049999999999S":                    0,
		"PT0.5000000004999S":                           500000000,
		"PT0.0000000015S":                              2,
		"PT1.000000000500000000000000000000000000001S": time.Second + 1,
		"PT1.5H":                         90 * time.Minute,
		"P0.5D":                          12 * time.Hour,
		"PT0.1M":                         6 * time.Second,
		"PT0.000000000001M":              0,
		"PT0.00000000001M":               1,
		"P0.0000000000000115740740D":     1,
		"PT.5S":                          500 * time.Millisecond,
		"PT5.S":                          5 * time.Second,
		"PT000000000000000000000000001S": time.Second,
	} {
		got, err := Parse(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"PT.S", "PT1.2.3S", "PT1,2.3S", "PT.,S"} {
		_, err := Parse(in)
		require.Error(t, err, in)
	}
}

// TestFormatRoundTripsExtremes: Format(math.MinInt64) wrote "-PT" (its magnitude does not fit a
// Duration), which Parse refuses; the largest durations read back exactly.
func TestFormatRoundTripsExtremes(t *testing.T) {
	for _, d := range []time.Duration{math.MinInt64, math.MinInt64 + 1, math.MaxInt64, 104*24*time.Hour + 1, 9007199254740993, -1} {
		back, err := Parse(Format(d))
		require.NoError(t, err, "%d: %s", d, Format(d))
		require.Equal(t, d, back, Format(d))
	}
	require.Equal(t, "-P106751DT23H47M16.854775808S", Format(math.MinInt64))
}

func TestFormat(t *testing.T) {
	require.Equal(t, "PT0S", Format(0))
	require.Equal(t, "PT1S", Format(time.Second))
	require.Equal(t, "PT1M30S", Format(90*time.Second))
	require.Equal(t, "P1DT2H", Format(26*time.Hour))
	require.Equal(t, "PT0.25S", Format(250*time.Millisecond))
}
