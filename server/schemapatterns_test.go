package server

import (
	"fmt"
	"strings"
	"testing"
)

// The bounds on a schema's regular expressions (schemalimits.go): Go's regexp matches in time
// proportional to the pattern's program times the string's length, and Validate cannot be
// stopped, so what a pattern can cost is bounded at registration and, for the strings of args, at
// enqueue.

// patternSchema is args [string] whose item must match pattern.
func patternSchema(pattern string) string {
	return fmt.Sprintf(`{"type":"array","items":{"type":"string","pattern":%q}}`, pattern)
}

// TestSchemaPatternProgramTooLargeRefused: a pattern whose program is large is refused, naming
// "pattern", though its text is short: ten [a-z]{1000} and "!" (111 bytes) compile to ten thousand
// instructions, ~11 s of matching for one 100 KB string. So is a patternProperties name, and a
// repeated group whose program would be huge (50,000 instructions) is refused before it is built.
func TestSchemaPatternProgramTooLargeRefused(t *testing.T) {
	s := newSchemaServer(t, "memory")
	for i, doc := range []string{
		patternSchema(strings.Repeat(`[a-z]{1000}`, 10) + "!"),
		patternSchema(`^[a-z]{600}[0-9]{600}$`),
		patternSchema(`(` + strings.Repeat(`[a-z]`, 50) + `){1000}`),
		patternSchema(strings.Repeat("x", schemaMaxPatternBytes+1)),
	} {
		r := tryRegisterSchema(t, s, fmt.Sprintf("urn:test:pattern-%d", i), "pattern.big", doc)
		wantSchemaRefused(t, r, "pattern")
		wantSchemaRefused(t, r, "more than")
	}
	r := tryRegisterSchema(t, s, "urn:test:pattern-props", "pattern.big", `{"type":"object","patternProperties":{"^[a-z]{800}[0-9]{800}$":{}}}`)
	wantSchemaRefused(t, r, "the pattern compiles to")
	wantSchemaRefused(t, r, "^[a-z]{800}[0-9]{800}$")
}

// TestSchemaPatternsPerValueAndDocumentBounded: patterns small one by one are bounded where they
// add up: those one value is matched against (each as often as it is applied), and all of a
// document's together.
func TestSchemaPatternsPerValueAndDocumentBounded(t *testing.T) {
	s := newSchemaServer(t, "memory")
	big := `^[a-z]{900}$` // about 900 instructions
	thrice := fmt.Sprintf(`{"$defs":{"p":{"pattern":%q}},"type":"array","items":{"allOf":[{"$ref":"#/$defs/p"},{"$ref":"#/$defs/p"},{"$ref":"#/$defs/p"}]}}`, big)
	wantSchemaRefused(t, tryRegisterSchema(t, s, "urn:test:pattern-thrice", "pattern.sum", thrice), "args[*]")

	var props []string
	for i := range 12 {
		props = append(props, fmt.Sprintf(`"p%d":{"pattern":"^[a-z]{%d}$"}`, i, 900+i))
	}
	many := `{"type":"object","properties":{` + strings.Join(props, ",") + `}}`
	wantSchemaRefused(t, tryRegisterSchema(t, s, "urn:test:pattern-many", "pattern.sum", many), "together")

	// Two on one value are within the bound.
	twice := fmt.Sprintf(`{"type":"array","items":{"allOf":[{"pattern":%q},{"pattern":%q}]}}`, big, big)
	registerSchema(t, s, "urn:test:pattern-twice", "pattern.twice", twice)
}

// TestSchemaPatternValidatesArgs: an ordinary pattern registers and validates as before.
func TestSchemaPatternValidatesArgs(t *testing.T) {
	s := newSchemaServer(t, "memory")
	registerSchema(t, s, "urn:test:email", "pattern.email", patternSchema(`^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}$`))
	mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"pattern.email","args":["ada@example.com"]}`)
	r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"pattern.email","args":["not an address"]}`)
	wantErrorField(t, r, 422, CodeSchemaValidationFailed, "args[0]")
}

// TestSchemaPatternArgsStringsBounded: at enqueue, the strings of args times the schema's pattern
// work are bounded too, so that a schema at the limits cannot be made to match for long by long
// args: beyond the bound the job is refused 422 naming args, before validating; below it, validated.
func TestSchemaPatternArgsStringsBounded(t *testing.T) {
	s := newSchemaServer(t, "memory")
	registerSchema(t, s, "urn:test:pattern-work", "pattern.work", patternSchema(`[a-z]{990}!`))
	long := strings.Repeat("a", 2*schemaMaxMatchWork/990)
	r := call(t, s, "POST", "/ojs/v1/jobs", fmt.Sprintf(`{"type":"pattern.work","args":[%q]}`, long))
	wantErrorField(t, r, 422, "", "args")
	if msg := r.body["error"].(map[string]any)["message"].(string); !strings.Contains(msg, "bytes of strings") {
		t.Fatalf("message %q does not say the strings are too long for the schema's patterns", msg)
	}
	// Names count too (matched by patternProperties and propertyNames).
	registerSchema(t, s, "urn:test:pattern-names", "pattern.names", `{"type":"array","items":{"type":"object","propertyNames":{"pattern":"[a-z]{990}!"}}}`)
	r = call(t, s, "POST", "/ojs/v1/jobs", fmt.Sprintf(`{"type":"pattern.names","args":[{%q:1}]}`, long))
	wantErrorField(t, r, 422, "", "args")

	short := strings.Repeat("a", 990) + "!"
	mustCall(t, s, 201, "POST", "/ojs/v1/jobs", fmt.Sprintf(`{"type":"pattern.work","args":[%q]}`, short))
	r = call(t, s, "POST", "/ojs/v1/jobs", `{"type":"pattern.work","args":["abc"]}`)
	wantErrorField(t, r, 422, CodeSchemaValidationFailed, "args[0]")
}
