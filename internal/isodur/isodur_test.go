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

func TestFormat(t *testing.T) {
	require.Equal(t, "PT0S", Format(0))
	require.Equal(t, "PT1S", Format(time.Second))
	require.Equal(t, "PT1M30S", Format(90*time.Second))
	require.Equal(t, "P1DT2H", Format(26*time.Hour))
	require.Equal(t, "PT0.25S", Format(250*time.Millisecond))
}
