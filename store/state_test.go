package store

import "testing"

// TestFinishable: a completion may end an attempt in any state but active and pending.
func TestFinishable(t *testing.T) {
	for _, s := range AllStates {
		want := s != StateActive && s != StatePending
		if got := s.Finishable(); got != want {
			t.Errorf("%s.Finishable() = %v, want %v", s, got, want)
		}
	}
	if State("bogus").Finishable() {
		t.Error("an unknown state is not finishable")
	}
}
