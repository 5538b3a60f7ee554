package pronto

import (
	"strings"
	"testing"
)

func TestParsePriority(t *testing.T) {
	for in, want := range map[string]int{"high": 10, "HIGH": 10, "Normal": 0, "low": -10, "7": 7, "-100": -100, "100": 100} {
		got, err := ParsePriority(in)
		if err != nil || got != want {
			t.Fatalf("ParsePriority(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, mention := range map[string]string{"urgent": "high, normal, low", "": "high, normal, low", " high": "high, normal, low", "101": "between -100 and 100", "-101": "between -100 and 100", "1.5": "integer"} {
		if _, err := ParsePriority(in); err == nil || !strings.Contains(err.Error(), mention) {
			t.Fatalf("ParsePriority(%q): error %v, want one mentioning %q", in, err, mention)
		}
	}
}
