package pronto_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pronto-jobs/pronto"
)

// TestCheckMetaSize: a meta is measured as compact JSON against the limit (DefaultMaxMetaBytes when
// none is given), and one over it is a *MetaTooLargeError that is also an ErrInvalidArgs.
func TestCheckMetaSize(t *testing.T) {
	at := `{"b":"` + strings.Repeat("x", pronto.DefaultMaxMetaBytes-len(`{"b":""}`)) + `"}`
	if err := pronto.CheckMetaSize([]byte(at), 0); err != nil {
		t.Errorf("a meta of exactly the default limit: %v", err)
	}
	if err := pronto.CheckMetaSize([]byte("{ \n"+at[1:]), 0); err != nil {
		t.Errorf("the same meta with white space added: %v", err)
	}
	err := pronto.CheckMetaSize([]byte(`{"b":"abcdef"}`), 10)
	var tl *pronto.MetaTooLargeError
	if !errors.As(err, &tl) || tl.Size != 14 || tl.Limit != 10 {
		t.Fatalf("a 14-byte meta against a limit of 10: %v, want a MetaTooLargeError{14, 10}", err)
	}
	if !errors.Is(err, pronto.ErrInvalidArgs) {
		t.Errorf("%v is not an ErrInvalidArgs", err)
	}
}

// TestValidMetaKey: meta keys are 1 to 128 of [a-zA-Z0-9_.-] (ojs-security.md §8.3).
func TestValidMetaKey(t *testing.T) {
	for _, k := range []string{"trace_id", "X-Request.Id", "ojs.replay_count", "_x", strings.Repeat("k", 128)} {
		if !pronto.ValidMetaKey(k) {
			t.Errorf("ValidMetaKey(%q) = false, want true", k)
		}
	}
	for _, k := range []string{"", strings.Repeat("k", 129), "a:b", "a/b", "a b", "X-Evil\r\nSet-Cookie", "é"} {
		if pronto.ValidMetaKey(k) {
			t.Errorf("ValidMetaKey(%q) = true, want false", k)
		}
	}
}
