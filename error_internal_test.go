package pronto

import (
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/pronto-jobs/pronto/store"
)

type customErr struct{}

func (customErr) Error() string { return "custom" }

func TestErrorType(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{errors.New("x"), "error"},
		{fmt.Errorf("plain %d", 1), "error"},
		{fmt.Errorf("wrapped: %w", errors.New("x")), "error"},
		{errors.Join(errors.New("a"), errors.New("b")), "error"},
		{&net.OpError{Op: "dial", Err: errors.New("refused")}, "net.OpError"},
		{fmt.Errorf("ctx: %w", &net.OpError{Op: "dial", Err: errors.New("refused")}), "net.OpError"},
		{Discard(fmt.Errorf("bad: %w", customErr{})), "pronto.customErr"},
		{Cancel(errors.New("stop")), "error"},
		{&SnoozeError{}, "pronto.SnoozeError"},
	} {
		if got := errorType(c.err); got != c.want {
			t.Errorf("errorType(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// TestWrapOpNamesTheOperationOnce: a store error that already names the operation is not prefixed
// with it again.
func TestWrapOpNamesTheOperationOnce(t *testing.T) {
	for _, c := range []struct {
		op   string
		err  error
		want string
	}{
		{`pause queue "default"`, fmt.Errorf(`pause queue "default": %w`, errors.New("database is locked")),
			`pronto: pause queue "default": database is locked`},
		{"cancel job X", fmt.Errorf("cancel job X: %w", store.ErrNotFound), "pronto: cancel job X: not found"},
		{"cancel job X", fmt.Errorf("memory: job X: %w", store.ErrNotFound), "pronto: cancel job X: not found"},
		{"list jobs", errors.New("connection reset"), "pronto: list jobs: connection reset"},
	} {
		err := wrapOp(c.op, c.err)
		if err.Error() != c.want {
			t.Errorf("wrapOp(%q, %q) = %q, want %q", c.op, c.err, err, c.want)
		}
		if !errors.Is(err, c.err) {
			t.Errorf("wrapOp(%q, %q) does not wrap the cause", c.op, c.err)
		}
	}
	te := &store.TransitionError{JobID: "X", Operation: "cancel", From: store.StateCompleted}
	if err := wrapOp("cancel job X", te); err != te {
		t.Errorf("a transition error names its operation already; got %q", err)
	}
}
