package pronto

import (
	"context"
	"errors"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/pronto-jobs/pronto/store/memory"
)

// The grammars of names, as regular expressions: the validators must accept exactly these.
var (
	queueGrammar   = regexp.MustCompile(`^[a-z0-9][a-z0-9.\-]*$`)
	rateKeyGrammar = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._:\-]*$`)
	kindGrammar    = regexp.MustCompile(`^[a-z][a-z0-9_\-]*(\.[a-z][a-z0-9_\-]*)*$`)
	ojsTypeGrammar = kindGrammar // one rule for kinds and OJS types
)

func TestNameValidatorsAcceptExactlyTheirGrammar(t *testing.T) {
	fixed := []string{
		"", "a", "A", "0", ".", "-", "_", ":", "default", "email.send", "email..send", ".email",
		"email.", "Email.send", "email.Send", "e1.s_2", "e.1s", "_a", "a_", "q-1.x", "-q", "q-",
		"dlq.test.manual-retry", "a-.b", "-a.b", "a.-b", "Rate:Key_1", "rate key", "é", "a\x00", "a.b.c.d", "a..", "9lives", "tenant:42/x",
	}
	r := rand.New(rand.NewPCG(1, 2))
	const alphabet = "abzAZ09._:-/ é"
	var inputs []string
	inputs = append(inputs, fixed...)
	for range 20000 {
		var b strings.Builder
		for range r.IntN(7) {
			b.WriteByte(alphabet[r.IntN(len(alphabet))])
		}
		inputs = append(inputs, b.String())
	}
	for _, s := range inputs {
		if got, want := ValidQueueName(s), queueGrammar.MatchString(s); got != want {
			t.Errorf("ValidQueueName(%q) = %v, want %v", s, got, want)
		}
		if got, want := ValidCronName(s), queueGrammar.MatchString(s); got != want {
			t.Errorf("ValidCronName(%q) = %v, want %v", s, got, want)
		}
		if got, want := ValidRateKey(s), rateKeyGrammar.MatchString(s); got != want {
			t.Errorf("ValidRateKey(%q) = %v, want %v", s, got, want)
		}
		if got, want := ValidKind(s), kindGrammar.MatchString(s); got != want {
			t.Errorf("ValidKind(%q) = %v, want %v", s, got, want)
		}
		if got, want := ValidOJSType(s), ojsTypeGrammar.MatchString(s); got != want {
			t.Errorf("ValidOJSType(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestNameValidatorsBoundLength(t *testing.T) {
	if !ValidQueueName(strings.Repeat("q", 128)) || ValidQueueName(strings.Repeat("q", 129)) {
		t.Error("queue names are bounded at 128 characters")
	}
	if !ValidKind(strings.Repeat("k", 255)) || ValidKind(strings.Repeat("k", 256)) {
		t.Error("kinds are bounded at 255 characters")
	}
	if !ValidOJSType(strings.Repeat("k", 255)) || ValidOJSType(strings.Repeat("k", 256)) {
		t.Error("OJS types are bounded at 255 characters")
	}
	if !ValidRateKey(strings.Repeat("R", 255)) || ValidRateKey(strings.Repeat("R", 256)) {
		t.Error("rate keys are bounded at 255 characters")
	}
	if !ValidCronName(strings.Repeat("c", 255)) || ValidCronName(strings.Repeat("c", 256)) {
		t.Error("cron names are bounded at 255 characters")
	}
}

// TestJobListRefusesNamesNoJobCanHave: a filter by an invalid queue name or kind is an error.
func TestJobListRefusesNamesNoJobCanHave(t *testing.T) {
	c, err := NewClient(memory.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*JobListParams{{Queues: []string{"Email"}}, {Kinds: []string{"Email.send"}}} {
		if _, err := c.JobList(context.Background(), p); !errors.Is(err, ErrInvalidArgs) {
			t.Errorf("JobList(%+v) = %v, want ErrInvalidArgs", p, err)
		}
	}
	if _, err := c.JobList(context.Background(), &JobListParams{Kinds: []string{"email-x.send"}, Queues: []string{"batch-2"}}); err != nil {
		t.Errorf("valid names refused: %v", err)
	}
}
