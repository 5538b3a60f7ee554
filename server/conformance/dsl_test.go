package conformance

// The OJS conformance DSL: loading cases, templates, JSONPath, matchers and step execution, as
// test-case-reference.md defines them, plus what the cases use beyond it (raw_body, parallel_with,
// captures, and the ASSERT checks exclusive_claim and equality). Anything else in a case is an error,
// so a feature this runner does not implement can never pass silently.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// testCase is one JSON case file.
type testCase struct {
	TestID      string          `json:"test_id"`
	Level       int             `json:"level"`
	Category    string          `json:"category"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	SpecRef     string          `json:"spec_ref"`
	Tags        []string        `json:"tags"`
	Setup       json.RawMessage `json:"setup"`
	Steps       []step          `json:"steps"`
	Teardown    json.RawMessage `json:"teardown"`

	file string
}

// step is one step of a case.
type step struct {
	ID           string            `json:"id"`
	Action       string            `json:"action"`
	Intent       string            `json:"intent"`
	Description  string            `json:"description"`
	Path         string            `json:"path"`
	Headers      map[string]string `json:"headers"`
	Body         json.RawMessage   `json:"body"`
	RawBody      *string           `json:"raw_body"`
	DelayMS      int64             `json:"delay_ms"`
	DurationMS   int64             `json:"duration_ms"`
	Assertions   json.RawMessage   `json:"assertions"`
	ParallelWith json.RawMessage   `json:"parallel_with"`
	Captures     map[string]string `json:"captures"`
}

// totalDelay is how long the case sleeps in all (delays and waits).
func (tc *testCase) totalDelay() time.Duration {
	var ms int64
	for _, s := range tc.Steps {
		ms += s.DelayMS + s.DurationMS
	}
	return time.Duration(ms) * time.Millisecond
}

// loadCases reads every *.json case under dir, strictly: an unknown field is an error.
func loadCases(dir string) ([]*testCase, error) {
	var out []*testCase
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, ".json") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		tc := &testCase{}
		if err := dec.Decode(tc); err != nil {
			return fmt.Errorf("case %s: %w", path, err)
		}
		if tc.TestID == "" || len(tc.Steps) == 0 {
			return fmt.Errorf("case %s: no test_id or no steps", path)
		}
		tc.file = path
		out = append(out, tc)
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].file < out[j].file })
	return out, err
}

// phaseSteps reads setup or teardown: {"steps": [...]} or a bare array of steps.
func phaseSteps(raw json.RawMessage) ([]step, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var steps []step
	if raw[0] == '[' {
		err := strictUnmarshal(raw, &steps)
		return steps, err
	}
	var obj struct {
		Steps []step `json:"steps"`
	}
	err := strictUnmarshal(raw, &obj)
	return obj.Steps, err
}

func strictUnmarshal(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// stepResult is what a step's request got back.
type stepResult struct {
	status   int
	header   http.Header
	raw      []byte
	body     any  // the parsed body
	hasBody  bool // raw is a JSON value
	duration time.Duration
}

// runner executes cases against one server.
type runner struct {
	baseURL      string
	client       *http.Client
	apiKey       string
	tolerancePct float64
}

// caseRun is the state of one case being run.
type caseRun struct {
	r        *runner
	mu       sync.Mutex
	results  map[string]*stepResult
	captures map[string]any
	failures []string
}

func (c *caseRun) failf(stepID, format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failures = append(c.failures, fmt.Sprintf("step %s: ", stepID)+fmt.Sprintf(format, args...))
}

// run executes a case and returns its failures (none: it passed).
func (r *runner) run(tc *testCase) []string {
	c := &caseRun{r: r, results: map[string]*stepResult{}, captures: map[string]any{}}
	setup, err := phaseSteps(tc.Setup)
	if err != nil {
		return []string{"setup: " + err.Error()}
	}
	teardown, err := phaseSteps(tc.Teardown)
	if err != nil {
		return []string{"teardown: " + err.Error()}
	}
	if len(setup) > 0 {
		c.runSteps(setup)
		if len(c.failures) > 0 {
			return append([]string{"setup failed"}, c.failures...)
		}
	}
	c.runSteps(tc.Steps)
	if len(teardown) > 0 {
		kept := c.failures
		c.runSteps(teardown)
		c.failures = kept
	}
	return c.failures
}

// parallelIDs reads parallel_with: a step id or a list of them.
func parallelIDs(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("parallel_with must be a step id or a list of them: %s", raw)
	}
	return many, nil
}

// runSteps runs steps in order; steps linked by parallel_with run at the same time.
func (c *caseRun) runSteps(steps []step) {
	done := make([]bool, len(steps))
	for i := range steps {
		if done[i] {
			continue
		}
		// The group of step i: every later step linked to it, directly or through another member.
		inGroup := map[string]bool{steps[i].ID: true}
		for changed := true; changed; {
			changed = false
			for j := i; j < len(steps); j++ {
				if done[j] {
					continue
				}
				ids, err := parallelIDs(steps[j].ParallelWith)
				if err != nil {
					c.failf(steps[j].ID, "%v", err)
					return
				}
				member := inGroup[steps[j].ID]
				for _, id := range ids {
					if inGroup[id] && !member {
						inGroup[steps[j].ID], member, changed = true, true, true
					}
				}
				if member {
					for _, id := range ids {
						if !inGroup[id] {
							inGroup[id], changed = true, true
						}
					}
				}
			}
		}
		var group []int
		for j := i; j < len(steps); j++ {
			if !done[j] && inGroup[steps[j].ID] {
				group = append(group, j)
				done[j] = true
			}
		}
		if len(group) == 1 {
			c.runStep(&steps[i])
			continue
		}
		var wg sync.WaitGroup
		for _, j := range group {
			wg.Add(1)
			go func(s *step) {
				defer wg.Done()
				c.runStep(s)
			}(&steps[j])
		}
		wg.Wait()
	}
}

// runStep executes one step and evaluates its assertions.
func (c *caseRun) runStep(s *step) {
	action := strings.ToUpper(s.Action)
	switch action {
	case "WAIT":
		d := s.DurationMS
		if d == 0 {
			d = s.DelayMS
		}
		time.Sleep(time.Duration(d) * time.Millisecond)
		return
	case "ASSERT":
		if s.DelayMS > 0 {
			time.Sleep(time.Duration(s.DelayMS) * time.Millisecond)
		}
		c.assertStep(s)
		return
	case "GET", "POST", "DELETE", "PUT", "PATCH", "HEAD":
	default:
		c.failf(s.ID, "unknown action %q", s.Action)
		return
	}
	if s.DelayMS > 0 {
		time.Sleep(time.Duration(s.DelayMS) * time.Millisecond)
	}
	res, err := c.do(s, action)
	if err != nil {
		c.failf(s.ID, "%v", err)
		return
	}
	c.mu.Lock()
	c.results[s.ID] = res
	c.mu.Unlock()
	for name, path := range s.Captures {
		if v, ok, err := resolvePath(res.body, res.hasBody, path); err == nil && ok {
			c.mu.Lock()
			c.captures[name] = v
			c.mu.Unlock()
		}
	}
	if len(s.Assertions) > 0 {
		for _, f := range c.evalAssertions(s, res) {
			c.failf(s.ID, "%s", f)
		}
	}
}

// do sends the step's request.
func (c *caseRun) do(s *step, method string) (*stepResult, error) {
	path := c.subst(s.Path)
	var body io.Reader
	hasBody := false
	switch {
	case s.RawBody != nil:
		body, hasBody = strings.NewReader(c.subst(*s.RawBody)), true
	case len(s.Body) > 0 && string(bytes.TrimSpace(s.Body)) != "null":
		var v any
		if err := json.Unmarshal(s.Body, &v); err != nil {
			return nil, fmt.Errorf("body is not JSON: %v", err)
		}
		b, err := json.Marshal(c.substValue(v))
		if err != nil {
			return nil, err
		}
		body, hasBody = bytes.NewReader(b), true
	}
	req, err := http.NewRequest(method, c.r.baseURL+path, body)
	if err != nil {
		return nil, fmt.Errorf("building the request: %v", err)
	}
	for k, v := range s.Headers {
		req.Header.Set(k, c.subst(v))
	}
	if hasBody && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/openjobspec+json")
	}
	if c.r.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.r.apiKey)
	}
	start := time.Now()
	resp, err := c.r.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	dur := time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the response: %v", method, path, err)
	}
	res := &stepResult{status: resp.StatusCode, header: resp.Header, raw: raw, duration: dur}
	if len(bytes.TrimSpace(raw)) > 0 && json.Unmarshal(raw, &res.body) == nil {
		res.hasBody = true
	}
	return res, nil
}

// Templates: {{steps.<id>.response.body[.<path>]}} and {{captures.<name>}}.
var templateRE = regexp.MustCompile(`\{\{\s*(steps\.([^.}\s]+)\.response\.body((?:[.\[][^}]*)?)|captures\.([^}\s]+))\s*\}\}`)

// subst resolves every template in s; an unresolvable one is left as it is.
func (c *caseRun) subst(s string) string {
	if !strings.Contains(s, "{{") {
		return s
	}
	return templateRE.ReplaceAllStringFunc(s, func(m string) string {
		v, ok := c.templateValue(m)
		if !ok {
			return m
		}
		return templateString(v)
	})
}

func (c *caseRun) templateValue(m string) (any, bool) {
	sub := templateRE.FindStringSubmatch(m)
	c.mu.Lock()
	defer c.mu.Unlock()
	if sub[4] != "" {
		v, ok := c.captures[sub[4]]
		return v, ok
	}
	res, ok := c.results[sub[2]]
	if !ok {
		return nil, false
	}
	v, found, err := resolvePath(res.body, res.hasBody, "$"+sub[3])
	if err != nil || !found || v == nil {
		return nil, false
	}
	return v, true
}

// templateString renders a resolved value: strings as they are, whole numbers without decimals,
// other numbers in decimal notation, objects and arrays as JSON.
func templateString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1e15 {
			return strconv.FormatInt(int64(x), 10)
		}
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// substValue resolves templates in every string (and object key) of a decoded JSON value.
func (c *caseRun) substValue(v any) any {
	switch x := v.(type) {
	case string:
		return c.subst(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = c.substValue(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[c.subst(k)] = c.substValue(e)
		}
		return out
	}
	return v
}

// evalAssertions checks a request step's assertions.
func (c *caseRun) evalAssertions(s *step, res *stepResult) []string {
	var a map[string]json.RawMessage
	if err := json.Unmarshal(s.Assertions, &a); err != nil {
		return []string{"assertions must be an object: " + err.Error()}
	}
	var fails []string
	fail := func(format string, args ...any) { fails = append(fails, fmt.Sprintf(format, args...)) }
	keys := sortedKeys(a)
	for _, k := range keys {
		raw := a[k]
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			fail("assertion %s is not JSON", k)
			continue
		}
		v = c.substValue(v)
		switch k {
		case "status":
			if err := match(v, float64(res.status), true, c.r.tolerancePct); err != nil {
				fail("status: %v (body %s)", err, snippet(res.raw))
			}
		case "status_in":
			list, ok := v.([]any)
			if !ok {
				fail("status_in must be a list")
				continue
			}
			hit := false
			for _, want := range list {
				if n, ok := want.(float64); ok && int(n) == res.status {
					hit = true
				}
			}
			if !hit {
				fail("status_in: got %d, want one of %v (body %s)", res.status, list, snippet(res.raw))
			}
		case "body":
			for _, f := range matchBody(v, res.body, res.hasBody, c.r.tolerancePct) {
				fail("body: %s (body %s)", f, snippet(res.raw))
			}
		case "body_absent":
			list, ok := v.([]any)
			if !ok {
				fail("body_absent must be a list of paths")
				continue
			}
			for _, p := range list {
				ps, _ := p.(string)
				got, found, err := resolvePath(res.body, res.hasBody, ps)
				if err != nil {
					fail("body_absent %q: %v", ps, err)
				} else if found && got != nil {
					fail("body_absent %q: present (%s)", ps, jsonText(got))
				}
			}
		case "body_raw":
			if str, ok := v.(string); ok {
				if string(res.raw) != str {
					fail("body_raw: got %s, want %s", snippet(res.raw), str)
				}
			} else if !res.hasBody || !reflect.DeepEqual(normalize(v), res.body) {
				fail("body_raw: got %s, want %s", snippet(res.raw), jsonText(v))
			}
		case "body_contains":
			list, ok := v.([]any)
			if !ok {
				fail("body_contains must be a list of strings")
				continue
			}
			for _, sub := range list {
				ss, _ := sub.(string)
				if !strings.Contains(string(res.raw), ss) {
					fail("body_contains: %q not in %s", ss, snippet(res.raw))
				}
			}
		case "headers":
			m, ok := v.(map[string]any)
			if !ok {
				fail("headers must be an object")
				continue
			}
			for _, name := range sortedKeys(m) {
				want := m[name]
				vals := res.header.Values(name)
				got := strings.Join(vals, ", ")
				if ws, ok := want.(string); ok {
					if len(vals) == 0 || got != ws {
						fail("header %s: got %q, want %q", name, got, ws)
					}
					continue
				}
				if err := match(want, got, len(vals) > 0, c.r.tolerancePct); err != nil {
					fail("header %s: %v", name, err)
				}
			}
		case "timing_ms":
			for _, f := range matchTiming(v, res.duration, c.r.tolerancePct) {
				fail("timing_ms: %s", f)
			}
		default:
			fail("unsupported assertion %q", k)
		}
	}
	return fails
}

// assertStep evaluates an ASSERT step's cross-step checks.
func (c *caseRun) assertStep(s *step) {
	var a map[string]any
	if err := json.Unmarshal(s.Assertions, &a); err != nil {
		c.failf(s.ID, "assertions must be an object")
		return
	}
	if len(a) == 0 {
		c.failf(s.ID, "ASSERT step without assertions")
	}
	for _, k := range sortedKeys(a) {
		v := c.substValue(a[k])
		switch k {
		case "exclusive_claim":
			if err := exclusiveClaim(v); err != nil {
				c.failf(s.ID, "exclusive_claim: %v", err)
			}
		case "equality":
			m, ok := v.(map[string]any)
			if !ok {
				c.failf(s.ID, "equality must map paths to expected values")
				continue
			}
			root := c.contextObject()
			for _, path := range sortedKeys(m) {
				got, found, err := resolvePath(root, true, path)
				if err != nil || !found {
					c.failf(s.ID, "equality %s: path does not resolve (%v)", path, err)
					continue
				}
				want := m[path]
				if ws, ok := want.(string); ok {
					var parsed any
					if json.Unmarshal([]byte(ws), &parsed) == nil {
						want = parsed
					}
				}
				if !reflect.DeepEqual(normalize(want), normalize(got)) {
					c.failf(s.ID, "equality %s: got %s, want %s", path, jsonText(got), jsonText(want))
				}
			}
		default:
			c.failf(s.ID, "unsupported ASSERT check %q", k)
		}
	}
}

// contextObject is {"steps": {id: {"response": {"status", "headers", "body"}}}} for ASSERT paths.
func (c *caseRun) contextObject() any {
	c.mu.Lock()
	defer c.mu.Unlock()
	steps := map[string]any{}
	for id, r := range c.results {
		h := map[string]any{}
		for k, v := range r.header {
			h[strings.ToLower(k)] = strings.Join(v, ", ")
		}
		resp := map[string]any{"status": float64(r.status), "headers": h}
		if r.hasBody {
			resp["body"] = r.body
		}
		steps[id] = map[string]any{"response": resp}
	}
	return map[string]any{"steps": steps}
}

// exclusiveClaim checks that of several fetches, exactly one got the job (and, when asked, exactly
// one got nothing).
func exclusiveClaim(v any) error {
	m, ok := v.(map[string]any)
	if !ok {
		return errors.New("must be an object")
	}
	for k := range m {
		switch k {
		case "job_id", "fetches", "exactly_one_has_job", "exactly_one_empty":
		default:
			return fmt.Errorf("unknown field %q", k)
		}
	}
	jobID, _ := m["job_id"].(string)
	if jobID == "" || strings.Contains(jobID, "{{") {
		return fmt.Errorf("job_id did not resolve: %v", m["job_id"])
	}
	fetches, ok := m["fetches"].([]any)
	if !ok || len(fetches) == 0 {
		return errors.New("fetches must be a non-empty list")
	}
	withJob, empty := 0, 0
	for i, f := range fetches {
		if s, ok := f.(string); ok {
			var parsed any
			if err := json.Unmarshal([]byte(s), &parsed); err != nil {
				return fmt.Errorf("fetch %d did not resolve to a job list: %s", i, s)
			}
			f = parsed
		}
		jobs, ok := f.([]any)
		if !ok {
			return fmt.Errorf("fetch %d is not a list of jobs", i)
		}
		if len(jobs) == 0 {
			empty++
		}
		for _, j := range jobs {
			if jm, ok := j.(map[string]any); ok && jm["id"] == jobID {
				withJob++
				break
			}
		}
	}
	if b, _ := m["exactly_one_has_job"].(bool); b && withJob != 1 {
		return fmt.Errorf("%d fetches returned job %s, want exactly 1", withJob, jobID)
	}
	if b, _ := m["exactly_one_empty"].(bool); b && empty != 1 {
		return fmt.Errorf("%d fetches were empty, want exactly 1", empty)
	}
	return nil
}

// matchBody checks a body assertion object: JSONPath keys, a top-level $or of alternative body
// objects, and operators applied to the whole body.
func matchBody(spec any, body any, hasBody bool, tol float64) []string {
	m, ok := spec.(map[string]any)
	if !ok {
		return []string{"body assertion must be an object"}
	}
	var fails []string
	for _, key := range sortedKeys(m) {
		want := m[key]
		switch {
		case key == "$or":
			alts, ok := want.([]any)
			if !ok || len(alts) == 0 {
				fails = append(fails, "$or must be a non-empty list of body assertions")
				continue
			}
			var why []string
			passed := false
			for i, alt := range alts {
				f := matchBody(alt, body, hasBody, tol)
				if len(f) == 0 {
					passed = true
					break
				}
				why = append(why, fmt.Sprintf("alternative %d: %s", i, strings.Join(f, "; ")))
			}
			if !passed {
				fails = append(fails, "no $or alternative matched: "+strings.Join(why, " | "))
			}
		case strings.HasPrefix(key, "$") && !strings.HasPrefix(key, "$.") && !strings.HasPrefix(key, "$[") && key != "$":
			// An operator applied to the whole body, such as {"$empty": true}.
			if err := match(map[string]any{key: want}, body, hasBody, tol); err != nil {
				fails = append(fails, fmt.Sprintf("$: %v", err))
			}
		default:
			got, found, err := resolvePath(body, hasBody, key)
			if err != nil {
				fails = append(fails, fmt.Sprintf("%s: %v", key, err))
				continue
			}
			if err := match(want, got, found, tol); err != nil {
				fails = append(fails, fmt.Sprintf("%s: %v", key, err))
			}
		}
	}
	return fails
}

// matchTiming checks less_than, greater_than and approximate.
func matchTiming(v any, d time.Duration, tol float64) []string {
	m, ok := v.(map[string]any)
	if !ok {
		return []string{"must be an object"}
	}
	ms := float64(d.Milliseconds())
	var fails []string
	for _, k := range sortedKeys(m) {
		n, ok := m[k].(float64)
		if !ok {
			fails = append(fails, k+" must be a number")
			continue
		}
		switch k {
		case "less_than":
			if ms >= n {
				fails = append(fails, fmt.Sprintf("took %vms, want < %vms", ms, n))
			}
		case "greater_than":
			if ms <= n {
				fails = append(fails, fmt.Sprintf("took %vms, want > %vms", ms, n))
			}
		case "approximate":
			if err := approx(n, ms, tol); err != nil {
				fails = append(fails, err.Error())
			}
		default:
			fails = append(fails, "unknown timing check "+k)
		}
	}
	return fails
}

// approx passes when |actual - expected| <= max(expected * tol%, 100).
func approx(expected, actual, tolPct float64) error {
	tolerance := math.Max(expected*tolPct/100, 100)
	if math.Abs(actual-expected) > tolerance {
		return fmt.Errorf("got %v, want ~%v (±%v)", actual, expected, tolerance)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func snippet(b []byte) string {
	s := string(b)
	if len(s) > 400 {
		s = s[:400] + "..."
	}
	return s
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	return string(b)
}

// normalize round-trips a value through JSON so that values built differently compare equal.
func normalize(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if json.Unmarshal(b, &out) != nil {
		return v
	}
	return out
}
