package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// newSchemaServer returns a Server over a fresh store of the given kind.
func newSchemaServer(t *testing.T, kind string) *Server {
	t.Helper()
	s, _ := storeServer(t, kind, Config{})
	return s
}

// registerSchema registers doc under uri for kind (version 1) and requires 201.
func registerSchema(t *testing.T, s *Server, uri, kind, doc string) {
	t.Helper()
	mustCall(t, s, 201, "POST", "/ojs/v1/schemas", fmt.Sprintf(`{"uri":%q,"type":%q,"version":1,"schema":%s}`, uri, kind, doc))
}

// tryRegisterSchema registers doc and returns the answer. The costly documents of these tests are
// refused by the limits before the library compiles or applies them (their error names the limit);
// without the limits the call does not return for minutes, and the test times out.
func tryRegisterSchema(t *testing.T, s *Server, uri, kind, doc string) *response {
	t.Helper()
	return call(t, s, "POST", "/ojs/v1/schemas", fmt.Sprintf(`{"uri":%q,"type":%q,"version":1,"schema":%s}`, uri, kind, doc))
}

// wantSchemaRefused requires a 400 whose details.schema_error contains want.
func wantSchemaRefused(t *testing.T, r *response, want string) {
	t.Helper()
	checkErrorBody(t, r, 400, "")
	details, _ := r.body["error"].(map[string]any)["details"].(map[string]any)
	if msg, _ := details["schema_error"].(string); !strings.Contains(msg, want) {
		t.Fatalf("schema_error %q, want it to mention %q: %s", msg, want, r.raw)
	}
}

// wantErrorField requires an error answer with the given status and details.field.
func wantErrorField(t *testing.T, r *response, status int, code, field string) {
	t.Helper()
	checkErrorBody(t, r, status, code)
	details, _ := r.body["error"].(map[string]any)["details"].(map[string]any)
	if details["field"] != field {
		t.Fatalf("details.field %v, want %s: %s", details["field"], field, r.raw)
	}
}

// stringArgSchema: args must be [string].
const stringArgSchema = `{"type":"array","prefixItems":[{"type":"string"}],"minItems":1,"maxItems":1}`

// TestSchemaReregisteredURITakesNewType: a URI deleted and registered again for another type, with
// the same document, applies to the new type, though the old registration was cached compiled.
func TestSchemaReregisteredURITakesNewType(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			s := newSchemaServer(t, kind)
			registerSchema(t, s, "urn:test:s", "a.b", stringArgSchema)
			mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":["x"]}`) // caches it
			mustCall(t, s, 200, "DELETE", "/ojs/v1/schemas/urn:test:s", nil)
			registerSchema(t, s, "urn:test:s", "e.f", stringArgSchema)

			mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"e.f","args":["conforming"]}`)
			mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"e.f","args":["x"],"schema":"urn:test:s"}`)
			mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[1]}`) // a.b has no schema now
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/jobs", `{"type":"e.f","args":[1]}`), 422, CodeSchemaValidationFailed)
		})
	}
}

// TestDeadLetterRetryOverrideArgsValidated: a dead-letter retry whose override replaces the args has
// them validated against the job's schema, as an enqueue would; the args it keeps are not checked
// again.
func TestDeadLetterRetryOverrideArgsValidated(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			s := newSchemaServer(t, kind)
			registerSchema(t, s, "urn:test:dl", "g.h", stringArgSchema)
			dead := func(queue string) string {
				id := enqueueJob(t, s, `{"type":"g.h","args":["ok"],"options":{"queue":"`+queue+`","retry":{"max_attempts":1}}}`)
				if got := fetchOneID(t, s, queue); got != id {
					t.Fatalf("fetched %s, want %s", got, id)
				}
				mustCall(t, s, 200, "POST", "/ojs/v1/workers/nack", `{"job_id":"`+id+`","worker_id":"w1","error":{"type":"Bad","message":"no"}}`)
				return id
			}
			id := dead("dl")
			r := call(t, s, "POST", "/ojs/v1/dead-letter/"+id+"/retry", `{"override":{"args":[123]}}`)
			wantErrorField(t, r, 422, CodeSchemaValidationFailed, "override.args[0]")
			mustCall(t, s, 200, "POST", "/ojs/v1/dead-letter/"+id+"/retry", `{"override":{"args":["fixed"]}}`)
			mustCall(t, s, 200, "POST", "/ojs/v1/dead-letter/"+dead("dl3")+"/retry", `{"override":{"queue":"dl2"}}`)
		})
	}
}

// TestCronTemplateArgsValidated: a cron registration's job template is validated against its type's
// schema when it is registered (occurrences are inserted through the Go client, unchecked), and the
// schema it names is kept with it.
func TestCronTemplateArgsValidated(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			s := newSchemaServer(t, kind)
			registerSchema(t, s, "urn:test:cron", "g.h", stringArgSchema)
			r := call(t, s, "POST", "/ojs/v1/cron", `{"name":"c1","expression":"*/5 * * * *","job_template":{"type":"g.h","args":[1]}}`)
			wantErrorField(t, r, 422, CodeSchemaValidationFailed, "job_template.args[0]")
			r = call(t, s, "POST", "/ojs/v1/cron", `{"name":"c2","expression":"*/5 * * * *","type":"g.h","args":[]}`)
			checkErrorBody(t, r, 422, CodeSchemaValidationFailed)
			r = call(t, s, "POST", "/ojs/v1/cron", `{"name":"c3","expression":"*/5 * * * *","job_template":{"type":"g.h","args":["x"],"schema":"urn:test:none"}}`)
			wantErrorField(t, r, 422, "", "job_template.schema")

			for _, body := range []string{
				`{"name":"c4","expression":"*/5 * * * *","job_template":{"type":"g.h","args":["x"],"schema":"urn:test:cron"}}`,
				`{"name":"c5","expression":"*/5 * * * *","type":"g.h","args":["x"],"schema":"urn:test:cron"}`,
			} {
				r = mustCall(t, s, 201, "POST", "/ojs/v1/cron", body)
				tmpl := r.body["cron"].(map[string]any)["job_template"].(map[string]any)
				if tmpl["schema"] != "urn:test:cron" {
					t.Fatalf("%s: the template lost its schema: %s", body, r.raw)
				}
			}
			r = mustCall(t, s, 200, "GET", "/ojs/v1/cron/c5", nil)
			if r.body["cron"].(map[string]any)["schema"] != "urn:test:cron" {
				t.Fatalf("GET: the registration lost its schema: %s", r.raw)
			}
		})
	}
}

// TestWorkflowStepsValidated: a workflow's steps and callbacks have their args validated as single
// enqueues do (ojs-core.md §5.2, §7.1): against the schema a step names, else its type's latest;
// errors name the step.
func TestWorkflowStepsValidated(t *testing.T) {
	s := newSchemaServer(t, "memory")
	registerSchema(t, s, "urn:test:wf", "g.h", stringArgSchema)
	registerSchema(t, s, "urn:test:wf-other", "k.l", stringArgSchema)
	for _, c := range []struct{ body, field string }{
		{`{"type":"chain","name":"c1","steps":[{"type":"a.b","args":[]},{"type":"g.h","args":[1],"schema":"urn:test:wf"}]}`, "steps[1].args[0]"},
		{`{"type":"chain","name":"c2","steps":[{"type":"g.h","args":["x"],"schema":"urn:test:none"}]}`, "steps[0].schema"},
		{`{"type":"chain","name":"c3","steps":[{"type":"g.h","args":["x"],"schema":"urn:test:wf-other"}]}`, "steps[0].schema"},
		{`{"type":"group","name":"g1","jobs":[{"type":"g.h","args":["x"]},{"type":"g.h","args":[]}]}`, "jobs[1].args"},
		{`{"type":"chain","name":"n1","steps":[{"type":"a.b","args":[]},{"type":"group","jobs":[{"type":"g.h","args":[2]}]}]}`, "steps[1].jobs[0].args[0]"},
		{`{"steps":[{"id":"a","type":"g.h","args":[3],"depends_on":[]}]}`, "steps[0].args[0]"},
		{`{"type":"batch","name":"b1","jobs":[{"type":"a.b","args":[]}],"callbacks":{"on_complete":{"type":"g.h","args":[4]}}}`, "callbacks.on_complete.args[0]"},
	} {
		r := call(t, s, "POST", "/ojs/v1/workflows", c.body)
		wantErrorField(t, r, 422, "", c.field)
	}
	mustCall(t, s, 201, "POST", "/ojs/v1/workflows",
		`{"type":"chain","name":"ok","steps":[{"type":"g.h","args":["x"],"schema":"urn:test:wf"},{"type":"g.h","args":["y"]}],"callbacks":{"on_success":{"type":"g.h","args":["z"]}}}`)
}

// TestSchemaReferenceCycleRefused: a schema whose references come back to a subschema on the same
// value (validation would never end; the library reports a cycle at every validation) is refused at
// registration, while recursive schemas that descend into the value are accepted and validate.
func TestSchemaReferenceCycleRefused(t *testing.T) {
	s := newSchemaServer(t, "memory")
	for i, doc := range []string{
		`{"$ref":"#"}`,
		`{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`,
		`{"type":"array","items":{"$ref":"#/$defs/x"},"$defs":{"x":{"anyOf":[{"$ref":"#/$defs/y"}]},"y":{"not":{"$ref":"#/$defs/x"}}}}`,
	} {
		wantSchemaRefused(t, tryRegisterSchema(t, s, fmt.Sprintf("urn:test:cyc%d", i), "cyc.t", doc), "reference cycle")
	}
	for i, c := range []struct{ doc, good, bad string }{
		// A binary tree: two properties refer back to the root.
		{`{"type":"array","items":{"$ref":"#/$defs/node"},"$defs":{"node":{"type":"object","required":["v"],"properties":{"v":{"type":"integer"},"left":{"$ref":"#/$defs/node"},"right":{"$ref":"#/$defs/node"}}}}}`,
			`[{"v":1,"left":{"v":2,"right":{"v":3}}}]`, `[{"v":1,"left":{"v":2,"right":{"v":"x"}}}]`},
		// Any JSON value without strings, through items and additionalProperties.
		{`{"$defs":{"v":{"anyOf":[{"type":"number"},{"type":"array","items":{"$ref":"#/$defs/v"}},{"type":"object","additionalProperties":{"$ref":"#/$defs/v"}}]}},"$ref":"#/$defs/v"}`,
			`[1,[2,{"a":[3]}]]`, `[1,[2,{"a":["x"]}]]`},
		// Recursion through $dynamicRef.
		{`{"$dynamicAnchor":"node","type":"array","items":{"$dynamicRef":"#node"}}`, `[[],[[]]]`, `[[],[1]]`},
	} {
		kind := fmt.Sprintf("rec.t%d", i)
		registerSchema(t, s, fmt.Sprintf("urn:test:rec%d", i), kind, c.doc)
		mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"`+kind+`","args":`+c.good+`}`)
		checkErrorBody(t, call(t, s, "POST", "/ojs/v1/jobs", `{"type":"`+kind+`","args":`+c.bad+`}`), 422, CodeSchemaValidationFailed)
	}
}

// TestSchemaExpansionRefused: a schema whose references apply subschemas to one value so many times
// that validating would not end in practice (each of 40 definitions applying the next twice: 2^40
// applications per enqueue, which Validate, taking no context, could not be stopped from doing) is
// refused at registration, at once; so is one that doubles its work at each level of nesting of the
// args. Fan-out that stays bounded is accepted.
func TestSchemaExpansionRefused(t *testing.T) {
	s := newSchemaServer(t, "memory")
	doubling := func(n int, apply string) string {
		var b strings.Builder
		b.WriteString(`{"$defs":{`)
		for i := range n {
			next := fmt.Sprintf(`{"$ref":"#/$defs/d%d"}`, i+1)
			fmt.Fprintf(&b, `"d%d":{"allOf":[%s,%s]},`, i, fmt.Sprintf(apply, next), fmt.Sprintf(apply, next))
		}
		fmt.Fprintf(&b, `"d%d":{"type":"array"}},"$ref":"#/$defs/d0"}`, n)
		return b.String()
	}
	wantSchemaRefused(t, tryRegisterSchema(t, s, "urn:test:expo", "expo.t", doubling(40, "%s")), "more than 1000 subschemas")
	wantSchemaRefused(t, tryRegisterSchema(t, s, "urn:test:expo-items", "expo.t", doubling(40, `{"items":%s}`)), "args[*]")
	// Doubling through recursion: each level of nested arrays applies the definition twice more.
	wantSchemaRefused(t, tryRegisterSchema(t, s, "urn:test:expo-rec", "expo.t",
		`{"$defs":{"t":{"allOf":[{"items":{"$ref":"#/$defs/t"}},{"items":{"$ref":"#/$defs/t"}}]}},"$ref":"#/$defs/t"}`), "more than 1000 subschemas")
	// Seven levels of doubling (509 applications) are accepted, and validation answers.
	registerSchema(t, s, "urn:test:expo-ok", "expo.ok", doubling(7, "%s"))
	mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"expo.ok","args":[1]}`)
}

// TestSchemaNestingAndSizeRefused: documents that would take the library long to compile (deeply
// nested, large, or holding many subschemas) are refused before compiling, at once; so that neither
// a registration nor a server's reread of the registry spends long on one.
func TestSchemaNestingAndSizeRefused(t *testing.T) {
	s := newSchemaServer(t, "memory")
	nested := func(depth int) string {
		return strings.Repeat(`{"items":`, depth) + `{}` + strings.Repeat(`}`, depth)
	}
	wantSchemaRefused(t, tryRegisterSchema(t, s, "urn:test:deep", "deep.t", nested(9000)), "more than")
	wantSchemaRefused(t, tryRegisterSchema(t, s, "urn:test:deep", "deep.t", nested(128)), "more than 128 levels")
	registerSchema(t, s, "urn:test:deep", "deep.t", nested(127))

	wide := `{"allOf":[` + strings.Repeat(`{},`, 3000) + `{}]}`
	wantSchemaRefused(t, tryRegisterSchema(t, s, "urn:test:wide", "wide.t", wide), "more than the 2048 allowed")
	big := `{"description":"` + strings.Repeat("x", 70<<10) + `"}`
	wantSchemaRefused(t, tryRegisterSchema(t, s, "urn:test:big", "big.t", big), "bytes, more than")
}

// TestSchemaStoredBeyondLimitsIsReported: a schema the store holds that the limits refuse (stored
// before they existed, or written to the store directly) is not applied, and not skipped either: a
// job of its type is refused with the reason, which does not blame the args.
func TestSchemaStoredBeyondLimitsIsReported(t *testing.T) {
	st := openStore(t, "memory")
	client, err := pronto.NewClient(st, &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestServer(t, Config{Client: client})
	js := &store.JobSchema{URI: "urn:test:stored", Kind: "st.t", Version: "1", Schema: []byte(`{"$ref":"#"}`), CreatedAt: time.Now().UTC()}
	if err := st.(store.SchemaStore).SchemaCreate(context.Background(), js); err != nil {
		t.Fatal(err)
	}
	r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"st.t","args":["x"]}`)
	wantErrorField(t, r, 422, "", "schema")
	if msg := r.body["error"].(map[string]any)["message"].(string); !strings.Contains(msg, "reference cycle") {
		t.Fatalf("message %q does not say what is wrong with the schema", msg)
	}
}
