package server

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Limits on a registered schema. The library compiles in time that grows faster than linearly with
// a document's nesting and its number of subschemas, and validates by applying subschemas as the
// document's references say, with no bound and no way to be interrupted (Validate takes no
// context). A registration is refused (400) unless, before compiling, the document is small and
// shallow enough, and, once compiled, no value of any args can be made to meet more than a bounded
// number of subschema applications: that bound, not a deadline, is what keeps an enqueue's
// validation short. Regular expressions are bounded the same way: Go's regexp matches in time
// proportional to the program's size times the string's length, so a pattern's program, the
// patterns one value is matched against, and (at enqueue) the strings of args are all bounded.
const (
	// schemaMaxBytes bounds a schema document (compact or not, as sent).
	schemaMaxBytes = 64 << 10
	// schemaMaxDepth bounds the nesting of the document's objects and arrays.
	schemaMaxDepth = 128
	// schemaMaxSubschemas bounds the objects and booleans in the document, which is what compile
	// time grows with (2,048 compile in tens of milliseconds).
	schemaMaxSubschemas = 2048
	// schemaMaxApplications bounds the subschemas validation applies to any one value of args,
	// references followed.
	schemaMaxApplications = 1000
	// schemaMaxAnalysis bounds the work checkSchemaCost itself does (steps of a few nanoseconds).
	schemaMaxAnalysis = 2_000_000

	// schemaMaxPatternBytes bounds the text of a regular expression, before it is parsed.
	schemaMaxPatternBytes = 4096
	// schemaMaxPatternInsts bounds the compiled program of one "pattern" or "patternProperties" name
	// (its instructions: roughly one per literal character or class, repeats expanded).
	schemaMaxPatternInsts = 1000
	// schemaMaxPatternsInsts bounds the programs of all the document's patterns together.
	schemaMaxPatternsInsts = 10_000
	// schemaMaxPatternWork bounds the instructions of the patterns one value is matched against,
	// each counted as often as it is applied: matching costs that much per character.
	schemaMaxPatternWork = 2000
	// schemaMaxMatchWork bounds, at enqueue, the bytes of args' strings times the schema's pattern
	// work (about 15 ns each at worst: a third of a second).
	schemaMaxMatchWork = 20_000_000
)

// boundedRegexp is a pattern whose program is known to be small; insts is its size.
type boundedRegexp struct {
	*regexp.Regexp
	insts int
}

// compileBoundedRegexp is the schema compiler's regexp engine: Go's regexp, refusing a pattern whose
// program is larger than schemaMaxPatternInsts, since every match costs its size per character.
// The size is estimated on the parsed expression first, so that a short pattern expanding to a huge
// program ("(a{1000}){1000}") is refused before it is built.
func compileBoundedRegexp(pattern string) (jsonschema.Regexp, error) {
	if len(pattern) > schemaMaxPatternBytes {
		return nil, fmt.Errorf("the pattern is %d bytes, more than the %d allowed", len(pattern), schemaMaxPatternBytes)
	}
	re, err := syntax.Parse(pattern, syntax.Perl) // the flags regexp.Compile uses
	if err != nil {
		return nil, err
	}
	tooLarge := func(n int) error {
		return fmt.Errorf("the pattern compiles to %s instructions, more than the %d allowed "+
			"(matching a string costs that many steps per character)", n2s(n), schemaMaxPatternInsts)
	}
	// The estimate may count a few more than the program holds: it only keeps huge ones from being built.
	if n := estimateInsts(re); n > 4*schemaMaxPatternInsts {
		return nil, tooLarge(n)
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return nil, err
	}
	if len(prog.Inst) > schemaMaxPatternInsts {
		return nil, tooLarge(len(prog.Inst))
	}
	rx, err := regexp.Compile(pattern)
	if err != nil {
		return nil, err
	}
	return boundedRegexp{Regexp: rx, insts: len(prog.Inst)}, nil
}

// n2s writes a count, "more than 16000" once estimateInsts stopped counting.
func n2s(n int) string {
	if n > 4*schemaMaxPatternInsts {
		return "more than " + strconv.Itoa(4*schemaMaxPatternInsts)
	}
	return strconv.Itoa(n)
}

// estimateInsts estimates the instructions re compiles to, repeats expanded, stopping once past
// 4*schemaMaxPatternInsts.
func estimateInsts(re *syntax.Regexp) int {
	const limit = 4*schemaMaxPatternInsts + 1
	sub := func() int {
		n := 0
		for _, s := range re.Sub {
			n = min(n+estimateInsts(s), limit)
		}
		return n
	}
	switch re.Op {
	case syntax.OpLiteral:
		return min(len(re.Rune), limit)
	case syntax.OpConcat, syntax.OpAlternate:
		return min(sub()+len(re.Sub), limit)
	case syntax.OpCapture, syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
		return min(sub()+2, limit)
	case syntax.OpRepeat:
		times := max(re.Min, re.Max, 1) // parsing refuses counts above 1000
		return min(sub()*times+max(re.Max-re.Min, 1)+1, limit)
	}
	return 1
}

// patternInsts returns the size of a pattern compileBoundedRegexp compiled (0 for any other).
func patternInsts(re jsonschema.Regexp) int {
	if b, ok := re.(boundedRegexp); ok {
		return b.insts
	}
	return 0
}

// checkSchemaShape refuses a document too large or too deeply nested to compile in reasonable time.
// doc is valid JSON.
func checkSchemaShape(doc []byte) error {
	if len(doc) > schemaMaxBytes {
		return fmt.Errorf("the schema is %d bytes, more than the %d allowed", len(doc), schemaMaxBytes)
	}
	depth, subschemas := 0, 0
	inString, escaped := false, false
	for _, c := range doc {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			if depth++; depth > schemaMaxDepth {
				return fmt.Errorf("the schema nests more than %d levels deep", schemaMaxDepth)
			}
			if c == '{' {
				subschemas++
			}
		case '}', ']':
			depth--
		case 't', 'f': // true, false: outside strings, only these literals hold t or f
			subschemas++
		}
	}
	if subschemas > schemaMaxSubschemas {
		return fmt.Errorf("the schema holds %d objects and booleans, more than the %d allowed", subschemas, schemaMaxSubschemas)
	}
	return nil
}

// errSchemaTooComplex is returned when checkSchemaCost runs out of budget before it can tell.
var errSchemaTooComplex = errors.New("the schema's references are too intricate to bound the cost of validating with it")

// schemaCost holds the state of checkSchemaCost.
type schemaCost struct {
	ids       map[*jsonschema.Schema]int      // every subschema reachable from the root, numbered
	dynamic   map[string][]*jsonschema.Schema // subschemas by $dynamicAnchor
	recursive []*jsonschema.Schema            // subschemas with "$recursiveAnchor": true
	applied   map[*jsonschema.Schema]int      // subschemas applied to one value for each applied, capped
	onPath    []*jsonschema.Schema            // the in-place references being followed
	work      int
	// patternWork is the most instructions of patterns any one value is matched against.
	patternWork int
}

// checkSchemaCost refuses a compiled schema whose references loop back to a subschema without
// descending into the value (validation could never end: the library reports a cycle instead), or
// that applies more than schemaMaxApplications subschemas to some value of args, whatever its
// shape (as 40 definitions each applying the next one twice do: 2^40 applications), or whose
// patterns are too large together, or for one value (schemaMaxPatternsInsts, schemaMaxPatternWork).
// It returns the schema's pattern work: the most pattern instructions per byte of any string of
// args (a name is matched twice: by patternProperties and by propertyNames).
func checkSchemaCost(root *jsonschema.Schema) (int, error) {
	c := &schemaCost{ids: map[*jsonschema.Schema]int{}, dynamic: map[string][]*jsonschema.Schema{}, applied: map[*jsonschema.Schema]int{}}
	c.collect(root)
	total := 0
	for _, s := range sortedSchemas(c.ids, c.ids) {
		if _, err := c.applications(s); err != nil {
			return 0, err
		}
		total += patternInsts(s.Pattern)
		for re := range s.PatternProperties {
			total += patternInsts(re)
		}
	}
	if total > schemaMaxPatternsInsts {
		return 0, fmt.Errorf("the schema's pattern and patternProperties compile to %d instructions together, more than the %d allowed", total, schemaMaxPatternsInsts)
	}
	if err := c.walkValues(root); err != nil {
		return 0, err
	}
	return c.patternWork, nil
}

// patternWork returns the instructions of the patterns a value meeting the subschemas of all (with
// their counts) is matched against: its own (pattern), or its names' (patternProperties).
func patternWork(all map[*jsonschema.Schema]int) int {
	own, names := 0, 0
	for s, n := range all {
		own += n * patternInsts(s.Pattern)
		for re := range s.PatternProperties {
			names += n * patternInsts(re)
		}
	}
	return max(own, names)
}

// collect numbers every subschema reachable from s.
func (c *schemaCost) collect(s *jsonschema.Schema) {
	stack := []*jsonschema.Schema{s}
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if _, ok := c.ids[s]; ok {
			continue
		}
		c.ids[s] = len(c.ids)
		if s.DynamicAnchor != "" {
			c.dynamic[s.DynamicAnchor] = append(c.dynamic[s.DynamicAnchor], s)
		}
		if s.RecursiveAnchor {
			c.recursive = append(c.recursive, s)
		}
		stack = append(stack, staticInPlace(s)...)
		for _, e := range childEdges(s) {
			stack = append(stack, e.sch)
		}
	}
}

// staticInPlace lists the subschemas s applies to the very value it is applied to, references
// taken as written.
func staticInPlace(s *jsonschema.Schema) []*jsonschema.Schema {
	var out []*jsonschema.Schema
	add := func(list ...*jsonschema.Schema) {
		for _, x := range list {
			if x != nil {
				out = append(out, x)
			}
		}
	}
	add(s.Ref, s.RecursiveRef, s.Not, s.If, s.Then, s.Else)
	add(s.AllOf...)
	add(s.AnyOf...)
	add(s.OneOf...)
	if s.DynamicRef != nil {
		add(s.DynamicRef.Ref)
	}
	for _, k := range sortedKeys(s.DependentSchemas) {
		add(s.DependentSchemas[k])
	}
	for _, k := range sortedKeys(s.Dependencies) {
		if d, ok := s.Dependencies[k].(*jsonschema.Schema); ok {
			add(d)
		}
	}
	return out
}

// inPlace is staticInPlace with dynamic references resolved every way they could be at validation:
// to any subschema with the same dynamic (or recursive) anchor. Each resolves to one of them, so
// the one written is not counted twice when it is among them.
func (c *schemaCost) inPlace(s *jsonschema.Schema) []*jsonschema.Schema {
	out := staticInPlace(s)
	others := func(written *jsonschema.Schema, anchored []*jsonschema.Schema) {
		for _, x := range anchored {
			if x != written {
				out = append(out, x)
			}
		}
	}
	if s.DynamicRef != nil && s.DynamicRef.Anchor != "" {
		others(s.DynamicRef.Ref, c.dynamic[s.DynamicRef.Anchor])
	}
	if s.RecursiveRef != nil {
		others(s.RecursiveRef, c.recursive)
	}
	return out
}

// applications returns how many subschemas applying s to a value applies to that value (s itself
// included), capped just above schemaMaxApplications, refusing references that loop.
func (c *schemaCost) applications(s *jsonschema.Schema) (int, error) {
	if n, ok := c.applied[s]; ok {
		return n, nil
	}
	if i := slices.Index(c.onPath, s); i >= 0 {
		return 0, refCycleError(append(c.onPath[i:], s))
	}
	c.onPath = append(c.onPath, s)
	n := 1
	for _, t := range c.inPlace(s) {
		m, err := c.applications(t)
		if err != nil {
			return 0, err
		}
		n = min(n+m, schemaMaxApplications+1)
	}
	c.onPath = c.onPath[:len(c.onPath)-1]
	c.applied[s] = n
	return n, nil
}

// refCycleError describes references that come back to where they started on the same value.
func refCycleError(cycle []*jsonschema.Schema) error {
	locs := make([]string, len(cycle))
	for i, s := range cycle {
		locs[i] = schemaLocation(s)
	}
	return fmt.Errorf("reference cycle: %s applies itself to the same value without end", strings.Join(locs, " -> "))
}

// schemaLocation names a subschema the way a client wrote it ("#/$defs/a").
func schemaLocation(s *jsonschema.Schema) string {
	return strings.TrimPrefix(s.Location, schemaURL)
}

// childEdge is a subschema applied to a part of the value: a member or an item.
type childEdge struct {
	sch *jsonschema.Schema
	// one of: name (a property named name), anyName (properties the schema does not name), index (the
	// item at index), anyIndex (items past the schema's prefix), key (property names), content.
	on    string
	name  string
	index int
}

// childEdges lists the subschemas s applies to parts of the value.
func childEdges(s *jsonschema.Schema) []childEdge {
	var out []childEdge
	add := func(x *jsonschema.Schema, on string) {
		if x != nil {
			out = append(out, childEdge{sch: x, on: on})
		}
	}
	for _, k := range sortedKeys(s.Properties) {
		out = append(out, childEdge{sch: s.Properties[k], on: "name", name: k})
	}
	patterns := make([]jsonschema.Regexp, 0, len(s.PatternProperties))
	for re := range s.PatternProperties {
		patterns = append(patterns, re)
	}
	slices.SortFunc(patterns, func(a, b jsonschema.Regexp) int { return strings.Compare(a.String(), b.String()) })
	for _, re := range patterns {
		add(s.PatternProperties[re], "anyName") // a pattern may match any name, a named one included
	}
	if x, ok := s.AdditionalProperties.(*jsonschema.Schema); ok {
		add(x, "otherName")
	}
	add(s.UnevaluatedProperties, "anyName")
	add(s.PropertyNames, "key")
	for i, x := range s.PrefixItems {
		out = append(out, childEdge{sch: x, on: "index", index: i})
	}
	add(s.Items2020, "otherIndex")
	switch it := s.Items.(type) {
	case *jsonschema.Schema:
		add(it, "anyIndex")
	case []*jsonschema.Schema:
		for i, x := range it {
			out = append(out, childEdge{sch: x, on: "index", index: i})
		}
		if x, ok := s.AdditionalItems.(*jsonschema.Schema); ok {
			add(x, "otherIndex")
		}
	}
	add(s.Contains, "anyIndex")
	add(s.UnevaluatedItems, "anyIndex")
	add(s.ContentSchema, "content")
	return out
}

// applies reports whether e applies to the part p of a value (p.on being name, otherName, index,
// otherIndex, key or content), given the number of prefix items and the names its schema s has.
func (e childEdge) applies(s *jsonschema.Schema, p childEdge) bool {
	switch e.on {
	case "name":
		return p.on == "name" && p.name == e.name
	case "otherName": // additionalProperties: names the schema does not list
		if p.on == "name" {
			_, listed := s.Properties[p.name]
			return !listed
		}
		return p.on == "otherName"
	case "anyName":
		return p.on == "name" || p.on == "otherName"
	case "index":
		return p.on == "index" && p.index == e.index
	case "otherIndex": // items past the schema's own prefix
		prefix := len(s.PrefixItems)
		if it, ok := s.Items.([]*jsonschema.Schema); ok {
			prefix = len(it)
		}
		return p.on == "otherIndex" || p.on == "index" && p.index >= prefix
	case "anyIndex":
		return p.on == "index" || p.on == "otherIndex"
	}
	return p.on == e.on // key, content
}

// valueState is the subschemas applied directly to one value, with how many times each is.
type valueState struct {
	path  string
	count map[*jsonschema.Schema]int
}

// walkValues follows what the schema applies to args, then to its members and items and theirs,
// every part a value could have told apart (each property the schemas name, any other, each prefix
// index, any other), and refuses the schema when some value would meet more than
// schemaMaxApplications subschemas. Sets of subschemas already seen are not followed again, so that
// recursive schemas end unless the counts keep growing, which is what makes them too costly.
func (c *schemaCost) walkValues(root *jsonschema.Schema) error {
	seen := map[string]bool{}
	stack := []valueState{{path: "args", count: map[*jsonschema.Schema]int{root: 1}}}
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		key := c.stateKey(v.count)
		if seen[key] {
			continue
		}
		seen[key] = true
		total := 0
		for s, n := range v.count {
			total += n * c.applied[s]
			if total > schemaMaxApplications {
				return fmt.Errorf("validating %s would apply more than %d subschemas to it, references followed", v.path, schemaMaxApplications)
			}
		}
		// Every subschema the value meets, with its count (the bound above caps this walk).
		all := map[*jsonschema.Schema]int{}
		var spread func(s *jsonschema.Schema, n int)
		spread = func(s *jsonschema.Schema, n int) {
			all[s] += n
			for _, t := range c.inPlace(s) {
				spread(t, n)
			}
		}
		for _, s := range sortedSchemas(v.count, c.ids) {
			spread(s, v.count[s])
		}
		type edge struct {
			from *jsonschema.Schema
			n    int
			childEdge
		}
		var edges []edge
		for _, s := range sortedSchemas(all, c.ids) {
			for _, e := range childEdges(s) {
				edges = append(edges, edge{s, all[s], e})
			}
		}
		w := patternWork(all)
		if w > schemaMaxPatternWork {
			return fmt.Errorf("validating %s would match it against patterns of %d instructions, counted as often as applied, "+
				"more than the %d allowed (matching costs that many steps per character)", v.path, w, schemaMaxPatternWork)
		}
		c.patternWork = max(c.patternWork, w)
		parts := valueParts(all)
		if c.work += total + len(parts)*len(edges); c.work > schemaMaxAnalysis {
			return errSchemaTooComplex
		}
		for _, p := range parts {
			next := map[*jsonschema.Schema]int{}
			for _, e := range edges {
				if e.applies(e.from, p) {
					next[e.sch] += e.n
				}
			}
			if len(next) > 0 {
				stack = append(stack, valueState{path: v.path + partPath(p), count: next})
			}
		}
	}
	return nil
}

// valueParts lists the parts of a value that the subschemas in all tell apart.
func valueParts(all map[*jsonschema.Schema]int) []childEdge {
	names := map[string]bool{}
	prefix := 0
	for s := range all {
		for k := range s.Properties {
			names[k] = true
		}
		prefix = max(prefix, len(s.PrefixItems))
		if it, ok := s.Items.([]*jsonschema.Schema); ok {
			prefix = max(prefix, len(it))
		}
	}
	parts := []childEdge{{on: "otherName"}, {on: "otherIndex"}, {on: "key"}, {on: "content"}}
	for _, k := range sortedKeys(names) {
		parts = append(parts, childEdge{on: "name", name: k})
	}
	for i := range prefix {
		parts = append(parts, childEdge{on: "index", index: i})
	}
	return parts
}

// partPath names a part of a value in error messages ("args.to", "args[*]").
func partPath(p childEdge) string {
	switch p.on {
	case "name":
		return "." + p.name
	case "otherName":
		return ".*"
	case "index":
		return "[" + strconv.Itoa(p.index) + "]"
	case "otherIndex":
		return "[*]"
	case "key":
		return "{name}"
	}
	return "{content}"
}

// stateKey identifies a set of subschemas with their counts.
func (c *schemaCost) stateKey(count map[*jsonschema.Schema]int) string {
	var b strings.Builder
	for _, s := range sortedSchemas(count, c.ids) {
		fmt.Fprintf(&b, "%d:%d,", c.ids[s], count[s])
	}
	return b.String()
}

// sortedSchemas returns the keys of m in the order of ids, for results that do not depend on map
// order.
func sortedSchemas(m map[*jsonschema.Schema]int, ids map[*jsonschema.Schema]int) []*jsonschema.Schema {
	out := make([]*jsonschema.Schema, 0, len(m))
	for s := range m {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *jsonschema.Schema) int { return ids[a] - ids[b] })
	return out
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
