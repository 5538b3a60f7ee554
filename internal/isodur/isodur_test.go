package isodur

import (
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

// TestParseRefusesDurationsBeyondInt64: a total just under 2^63 ns as written rounds to 2^63 in
// float64 and used to come back negative; each unit's overflow is refused, never wrapped.
func TestParseRefusesDurationsBeyondInt64(t *testing.T) {
	for _, in := range []string{
		"PT9223372036.854775807S", "PT9223372037S", "PT153722867.3M", "PT2562048H", "P106752D",
		"P106751DT24H", "PT99999999999999999999999999999999999999S", "-PT9223372036.854775807S",
	} {
		d, err := Parse(in)
		require.Error(t, err, "%s parsed as %v", in, d)
		require.Contains(t, err.Error(), "ISO 8601", in)
	}
	d, err := Parse("PT9223372036S") // just under the limit
	require.NoError(t, err)
	require.Equal(t, 9223372036*time.Second, d)
}

func TestFormat(t *testing.T) {
	require.Equal(t, "PT0S", Format(0))
	require.Equal(t, "PT1S", Format(time.Second))
	require.Equal(t, "PT1M30S", Format(90*time.Second))
	require.Equal(t, "P1DT2H", Format(26*time.Hour))
	require.Equal(t, "PT0.25S", Format(250*time.Millisecond))
}
