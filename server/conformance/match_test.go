package conformance

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// JSONPath, as the reference defines it: $ (the root), .field, [N], [*] (collect over every element,
// flattened, skipping elements that do not resolve), and [?(@.field=='value')] (the first element
// whose field equals the value; quoted or bare literals).

type pathTok struct {
	kind   byte // 'f' field, 'i' index, '*' wildcard, '?' filter
	name   string
	index  int
	filter []pathTok // the @-relative path of a filter
	value  string    // the literal a filter compares with
}

func parsePath(path string) ([]pathTok, error) {
	if !strings.HasPrefix(path, "$") {
		return nil, fmt.Errorf("JSONPath %q must start with $", path)
	}
	return tokenize(path[1:], path)
}

func tokenize(s, full string) ([]pathTok, error) {
	var toks []pathTok
	for len(s) > 0 {
		switch s[0] {
		case '.':
			s = s[1:]
			end := strings.IndexAny(s, ".[")
			if end < 0 {
				end = len(s)
			}
			name := s[:end]
			s = s[end:]
			switch name {
			case "":
				return nil, fmt.Errorf("JSONPath %q: empty field name", full)
			case "*":
				toks = append(toks, pathTok{kind: '*'})
			default:
				toks = append(toks, pathTok{kind: 'f', name: name})
			}
		case '[':
			end := closingBracket(s)
			if end < 0 {
				return nil, fmt.Errorf("JSONPath %q: unclosed [", full)
			}
			inner := strings.TrimSpace(s[1:end])
			s = s[end+1:]
			switch {
			case inner == "*":
				toks = append(toks, pathTok{kind: '*'})
			case strings.HasPrefix(inner, "?(") && strings.HasSuffix(inner, ")"):
				cond := strings.TrimSpace(inner[2 : len(inner)-1])
				left, right, ok := strings.Cut(cond, "==")
				left, right = strings.TrimSpace(left), strings.TrimSpace(right)
				if !ok || !strings.HasPrefix(left, "@") {
					return nil, fmt.Errorf("JSONPath %q: filter %q: only @.field==value is supported", full, inner)
				}
				sub, err := tokenize(left[1:], full)
				if err != nil {
					return nil, err
				}
				toks = append(toks, pathTok{kind: '?', filter: sub, value: unquote(right)})
			case len(inner) >= 2 && (inner[0] == '\'' || inner[0] == '"'):
				toks = append(toks, pathTok{kind: 'f', name: unquote(inner)})
			default:
				n, err := strconv.Atoi(inner)
				if err != nil {
					return nil, fmt.Errorf("JSONPath %q: bad index [%s]", full, inner)
				}
				toks = append(toks, pathTok{kind: 'i', index: n})
			}
		default:
			return nil, fmt.Errorf("JSONPath %q: unexpected %q", full, s[:1])
		}
	}
	return toks, nil
}

// closingBracket finds the ] that closes the [ at s[0], skipping quoted text.
func closingBracket(s string) int {
	var quote byte
	depth := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '[':
			depth++
		case c == ']':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '\'' || s[0] == '"') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}

// resolvePath evaluates path on a parsed body. found is false when the path leads nowhere (a missing
// field, an index out of range, a filter matching nothing); a present null is found.
func resolvePath(root any, hasRoot bool, path string) (v any, found bool, err error) {
	toks, err := parsePath(path)
	if err != nil {
		return nil, false, err
	}
	if !hasRoot {
		return nil, false, nil
	}
	v, found = evalPath(root, toks)
	return v, found, nil
}

func evalPath(cur any, toks []pathTok) (any, bool) {
	for i, t := range toks {
		switch t.kind {
		case 'f':
			m, ok := cur.(map[string]any)
			if !ok {
				return nil, false
			}
			if cur, ok = m[t.name]; !ok {
				return nil, false
			}
		case 'i':
			arr, ok := cur.([]any)
			if !ok {
				return nil, false
			}
			idx := t.index
			if idx < 0 {
				idx += len(arr)
			}
			if idx < 0 || idx >= len(arr) {
				return nil, false
			}
			cur = arr[idx]
		case '*':
			var elems []any
			switch x := cur.(type) {
			case []any:
				elems = x
			case map[string]any:
				for _, k := range sortedKeys(x) {
					elems = append(elems, x[k])
				}
			default:
				return nil, false
			}
			rest := toks[i+1:]
			deeper := false
			for _, r := range rest {
				if r.kind == '*' {
					deeper = true
				}
			}
			out := []any{}
			for _, e := range elems {
				v, ok := evalPath(e, rest)
				if !ok {
					continue
				}
				if sub, isList := v.([]any); isList && deeper {
					out = append(out, sub...)
				} else {
					out = append(out, v)
				}
			}
			return out, true
		case '?':
			arr, ok := cur.([]any)
			if !ok {
				return nil, false
			}
			hit := false
			for _, e := range arr {
				if v, ok := evalPath(e, t.filter); ok && fmt.Sprintf("%v", v) == t.value {
					cur, hit = e, true
					break
				}
			}
			if !hit {
				return nil, false
			}
		}
	}
	return cur, true
}

// Matchers. match checks the actual value at a path (found says whether the path resolved) against a
// matcher: a string matcher, a number, a boolean, null, an array (positional) or an object of
// operators.

var (
	uuidRE     = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	uuidv7RE   = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	datetimeRE = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$`)
	rangeRE    = regexp.MustCompile(`^number:range\(\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)\s*\)$`)
	lengthRE   = regexp.MustCompile(`^array:length\((\d+)\)$`)
	approxRE   = regexp.MustCompile(`^~(-?\d+(?:\.\d+)?)$`)
)

func describe(v any, found bool) string {
	if !found {
		return "nothing (absent)"
	}
	return fmt.Sprintf("%s %s", jsonType(v), jsonText(v))
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "boolean"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func match(m any, actual any, found bool, tol float64) error {
	switch x := m.(type) {
	case nil:
		if !found || actual != nil {
			return fmt.Errorf("want null, got %s", describe(actual, found))
		}
		return nil
	case bool:
		if b, ok := actual.(bool); !found || !ok || b != x {
			return fmt.Errorf("want %v, got %s", x, describe(actual, found))
		}
		return nil
	case float64:
		n, ok := actual.(float64)
		if !found || !ok {
			return fmt.Errorf("want %v, got %s", x, describe(actual, found))
		}
		if x == math.Trunc(x) && n == math.Trunc(n) {
			if x != n {
				return fmt.Errorf("want %v, got %v", x, n)
			}
			return nil
		}
		if math.Abs(x-n) > 1e-9 {
			return fmt.Errorf("want %v, got %v", x, n)
		}
		return nil
	case string:
		return matchString(x, actual, found, tol)
	case []any:
		arr, ok := actual.([]any)
		if !found || !ok {
			return fmt.Errorf("want an array of %d, got %s", len(x), describe(actual, found))
		}
		if len(arr) != len(x) {
			return fmt.Errorf("want an array of %d, got %d: %s", len(x), len(arr), jsonText(arr))
		}
		for i := range x {
			if err := match(x[i], arr[i], true, tol); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
		return nil
	case map[string]any:
		return matchObject(x, actual, found, tol)
	}
	return fmt.Errorf("unsupported matcher %s", jsonText(m))
}

func asArray(actual any, found bool, what string) ([]any, error) {
	arr, ok := actual.([]any)
	if !found || !ok {
		return nil, fmt.Errorf("want %s, got %s", what, describe(actual, found))
	}
	return arr, nil
}

func asString(actual any, found bool, what string) (string, error) {
	s, ok := actual.(string)
	if !found || !ok {
		return "", fmt.Errorf("want %s, got %s", what, describe(actual, found))
	}
	return s, nil
}

func asNumber(actual any, found bool, what string) (float64, error) {
	n, ok := actual.(float64)
	if !found || !ok {
		return 0, fmt.Errorf("want %s, got %s", what, describe(actual, found))
	}
	return n, nil
}

func matchString(m string, actual any, found bool, tol float64) error {
	switch m {
	case "any":
		if !found || actual == nil {
			return fmt.Errorf("want any non-null value, got %s", describe(actual, found))
		}
		return nil
	case "absent":
		if found && actual != nil {
			return fmt.Errorf("want absent, got %s", describe(actual, found))
		}
		return nil
	case "exists":
		if !found {
			return errors.New("want the field to exist, it is absent")
		}
		return nil
	case "string:nonempty", "string:non_empty":
		s, err := asString(actual, found, "a non-empty string")
		if err == nil && s == "" {
			err = errors.New("want a non-empty string, got \"\"")
		}
		return err
	case "string:uuid", "string:uuidv7", "string:datetime":
		s, err := asString(actual, found, m)
		if err != nil {
			return err
		}
		re := map[string]*regexp.Regexp{"string:uuid": uuidRE, "string:uuidv7": uuidv7RE, "string:datetime": datetimeRE}[m]
		if !re.MatchString(s) {
			return fmt.Errorf("want %s, got %q", m, s)
		}
		return nil
	case "number:positive", "number:non_negative":
		n, err := asNumber(actual, found, m)
		if err != nil {
			return err
		}
		if (m == "number:positive" && n <= 0) || n < 0 {
			return fmt.Errorf("want %s, got %v", m, n)
		}
		return nil
	case "array:nonempty", "array:empty":
		arr, err := asArray(actual, found, m)
		if err != nil {
			return err
		}
		if (m == "array:empty") != (len(arr) == 0) {
			return fmt.Errorf("want %s, got %d elements", m, len(arr))
		}
		return nil
	}
	if sub, ok := strings.CutPrefix(m, "string:contains:"); ok {
		s, err := asString(actual, found, "a string containing "+strconv.Quote(sub))
		if err == nil && !strings.Contains(s, sub) {
			err = fmt.Errorf("want a string containing %q, got %q", sub, s)
		}
		return err
	}
	if strings.HasPrefix(m, "string:pattern(") && strings.HasSuffix(m, ")") {
		pattern := m[len("string:pattern(") : len(m)-1]
		re, err := regexp.Compile(pattern)
		if err != nil {
			return fmt.Errorf("bad pattern %q: %v", pattern, err)
		}
		s, err := asString(actual, found, "a string matching "+pattern)
		if err == nil && !re.MatchString(s) {
			err = fmt.Errorf("want a string matching %s, got %q", pattern, s)
		}
		return err
	}
	if sm := rangeRE.FindStringSubmatch(m); sm != nil {
		lo, _ := strconv.ParseFloat(sm[1], 64)
		hi, _ := strconv.ParseFloat(sm[2], 64)
		n, err := asNumber(actual, found, m)
		if err == nil && (n < lo || n > hi) {
			err = fmt.Errorf("want a number in [%v, %v], got %v", lo, hi, n)
		}
		return err
	}
	if sm := approxRE.FindStringSubmatch(m); sm != nil {
		want, _ := strconv.ParseFloat(sm[1], 64)
		n, err := asNumber(actual, found, m)
		if err != nil {
			return err
		}
		return approx(want, n, tol)
	}
	if n, ok := arrayLen(m, "array:length:"); ok {
		arr, err := asArray(actual, found, m)
		if err == nil && len(arr) != n {
			err = fmt.Errorf("want %d elements, got %d: %s", n, len(arr), jsonText(arr))
		}
		return err
	}
	if sm := lengthRE.FindStringSubmatch(m); sm != nil {
		n, _ := strconv.Atoi(sm[1])
		arr, err := asArray(actual, found, m)
		if err == nil && len(arr) != n {
			err = fmt.Errorf("want %d elements, got %d: %s", n, len(arr), jsonText(arr))
		}
		return err
	}
	for _, prefix := range []string{"array:min_length:", "array:min:"} {
		if n, ok := arrayLen(m, prefix); ok {
			arr, err := asArray(actual, found, m)
			if err == nil && len(arr) < n {
				err = fmt.Errorf("want at least %d elements, got %d", n, len(arr))
			}
			return err
		}
	}
	if target, ok := strings.CutPrefix(m, "not_contains:"); ok {
		arr, err := asArray(actual, found, m)
		if err != nil {
			return err
		}
		for _, e := range arr {
			if fmt.Sprintf("%v", e) == target {
				return fmt.Errorf("want no element %q, got %s", target, jsonText(arr))
			}
		}
		return nil
	}
	if target, ok := strings.CutPrefix(m, "contains:"); ok {
		arr, err := asArray(actual, found, m)
		if err != nil {
			return err
		}
		for _, e := range arr {
			if fmt.Sprintf("%v", e) == target {
				return nil
			}
		}
		return fmt.Errorf("want an element %q, got %s", target, jsonText(arr))
	}
	if list, ok := strings.CutPrefix(m, "one_of:"); ok {
		if !found {
			return fmt.Errorf("want one of %s, got nothing", list)
		}
		got := fmt.Sprintf("%v", actual)
		for _, opt := range strings.Split(list, ",") {
			if strings.TrimSpace(opt) == got {
				return nil
			}
		}
		return fmt.Errorf("want one of %s, got %s", list, got)
	}
	s, err := asString(actual, found, strconv.Quote(m))
	if err == nil && s != m {
		err = fmt.Errorf("want %q, got %q", m, s)
	}
	return err
}

func arrayLen(m, prefix string) (int, bool) {
	rest, ok := strings.CutPrefix(m, prefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n >= 0
}

var operatorKeys = map[string]bool{
	"$exists": true, "$type": true, "$match": true, "$in": true, "$size": true, "$or": true,
	"$empty": true, "range": true,
}

// matchObject applies an object matcher: operators (all must hold), or, for an object without any,
// a field-by-field match of a nested object.
func matchObject(m map[string]any, actual any, found bool, tol float64) error {
	hasOp := false
	for k := range m {
		if operatorKeys[k] {
			hasOp = true
		} else if strings.HasPrefix(k, "$") {
			return fmt.Errorf("unknown operator %q", k)
		}
	}
	if !hasOp {
		obj, ok := actual.(map[string]any)
		if !found || !ok {
			return fmt.Errorf("want an object, got %s", describe(actual, found))
		}
		for _, k := range sortedKeys(m) {
			v, present := obj[k]
			if err := match(m[k], v, present, tol); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
		return nil
	}
	for _, k := range sortedKeys(m) {
		if !operatorKeys[k] {
			return fmt.Errorf("%q cannot be combined with operators", k)
		}
		want := m[k]
		switch k {
		case "$exists":
			b, ok := want.(bool)
			if !ok {
				return errors.New("$exists takes true or false")
			}
			if b != found {
				return fmt.Errorf("$exists %v, got %s", b, describe(actual, found))
			}
		case "$type":
			t, ok := want.(string)
			if !ok {
				return errors.New("$type takes a type name")
			}
			switch t {
			case "string", "number", "boolean", "null", "array", "object":
			default:
				return fmt.Errorf("unknown $type %q", t)
			}
			if !found || jsonType(actual) != t {
				return fmt.Errorf("$type %s, got %s", t, describe(actual, found))
			}
		case "$match":
			pattern, ok := want.(string)
			if !ok {
				return errors.New("$match takes a regular expression")
			}
			re, err := regexp.Compile(pattern)
			if err != nil {
				return fmt.Errorf("$match: bad pattern: %v", err)
			}
			s, err := asString(actual, found, "a string for $match")
			if err != nil {
				return err
			}
			if !re.MatchString(s) {
				return fmt.Errorf("$match %s, got %q", pattern, s)
			}
		case "$in", "$or":
			alts, ok := want.([]any)
			if !ok || len(alts) == 0 {
				return fmt.Errorf("%s takes a non-empty list", k)
			}
			hit := false
			for _, alt := range alts {
				if match(alt, actual, found, tol) == nil {
					hit = true
					break
				}
			}
			if !hit {
				return fmt.Errorf("%s %s, got %s", k, jsonText(alts), describe(actual, found))
			}
		case "$size":
			arr, err := asArray(actual, found, "an array for $size")
			if err != nil {
				return err
			}
			if err := matchSize(want, len(arr)); err != nil {
				return err
			}
		case "$empty":
			b, ok := want.(bool)
			if !ok {
				return errors.New("$empty takes true or false")
			}
			if b != isEmpty(actual, found) {
				return fmt.Errorf("$empty %v, got %s", b, describe(actual, found))
			}
		case "range":
			bounds, ok := want.(map[string]any)
			if !ok {
				return errors.New("range takes {min, max}")
			}
			n, err := asNumber(actual, found, "a number for range")
			if err != nil {
				return err
			}
			for bk, bv := range bounds {
				lim, ok := bv.(float64)
				if !ok || (bk != "min" && bk != "max") {
					return fmt.Errorf("range: bad bound %s=%v", bk, bv)
				}
				if (bk == "min" && n < lim) || (bk == "max" && n > lim) {
					return fmt.Errorf("range %s, got %v", jsonText(bounds), n)
				}
			}
		}
	}
	return nil
}

// matchSize checks $size: an exact length, or {"$gte"|"$gt"|"$lte"|"$lt"|"$eq": n}.
func matchSize(want any, n int) error {
	switch x := want.(type) {
	case float64:
		if float64(n) != x {
			return fmt.Errorf("$size %v, got %d", x, n)
		}
		return nil
	case map[string]any:
		for op, v := range x {
			lim, ok := v.(float64)
			if !ok {
				return fmt.Errorf("$size %s takes a number", op)
			}
			var ok2 bool
			switch op {
			case "$gte":
				ok2 = float64(n) >= lim
			case "$gt":
				ok2 = float64(n) > lim
			case "$lte":
				ok2 = float64(n) <= lim
			case "$lt":
				ok2 = float64(n) < lim
			case "$eq":
				ok2 = float64(n) == lim
			default:
				return fmt.Errorf("unknown $size comparison %q", op)
			}
			if !ok2 {
				return fmt.Errorf("$size %s %v, got %d", op, lim, n)
			}
		}
		return nil
	}
	return fmt.Errorf("$size takes a number or a comparison, not %s", jsonText(want))
}

// isEmpty: absent, null, "", [] or {}.
func isEmpty(v any, found bool) bool {
	if !found || v == nil {
		return true
	}
	switch x := v.(type) {
	case string:
		return x == ""
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}
