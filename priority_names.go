package pronto

import (
	"fmt"
	"strconv"
	"strings"
)

// The named priority levels of OJS (ojs-core.md, "priority"): aliases of numeric priorities, accepted
// by the HTTP API and the CLI wherever a priority is, and usable as InsertOpts.Priority.
const (
	PriorityHigh   = 10
	PriorityNormal = 0
	PriorityLow    = -10
)

// ParsePriority reads a priority given as an integer from PriorityMin to PriorityMax or as one of
// the named levels HIGH, NORMAL and LOW (any case), as the OJS HTTP API and the CLI accept it.
func ParsePriority(s string) (int, error) {
	if p, ok := PriorityByName(s); ok {
		return p, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("priority %q: must be an integer from %d to %d or one of high, normal, low", s, PriorityMin, PriorityMax)
	}
	if n < PriorityMin || n > PriorityMax {
		return 0, fmt.Errorf("priority %d: must be between %d and %d", n, PriorityMin, PriorityMax)
	}
	return n, nil
}

// PriorityByName returns the priority of a named level, HIGH, NORMAL or LOW (any case), and false
// for any other name.
func PriorityByName(name string) (int, bool) {
	switch strings.ToLower(name) {
	case "high":
		return PriorityHigh, true
	case "normal":
		return PriorityNormal, true
	case "low":
		return PriorityLow, true
	}
	return 0, false
}
