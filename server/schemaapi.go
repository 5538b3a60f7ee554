package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// The schema registry (ojs-http-binding.md §15): a JSON Schema per job type and version, registered,
// listed, read and deleted under /ojs/v1/schemas, kept by the store (store.SchemaStore). An enqueue
// whose job names a schema (the envelope's "schema", a URI), or whose type has a registered schema
// (the latest registered), has its args validated against it: 422 schema_validation_failed, naming
// the failing path, when they do not conform.

// CodeSchemaValidationFailed answers args that do not conform to their schema (OJS-1008, 422).
const CodeSchemaValidationFailed = "schema_validation_failed"

// schemaCacheTTL bounds how long a server validates with schemas another server may have changed
// since: the registry is reread at most this often, never once per enqueue.
const schemaCacheTTL = 2 * time.Second

// schemaURL is the address each schema is compiled under; documents cannot load other documents.
const schemaURL = "urn:pronto:schema"

// compiledSchema is a registered schema ready to validate with, or the reason it cannot be used
// (a document stored before the limits of schemalimits.go, or changed in the store behind our back).
type compiledSchema struct {
	meta *store.JobSchema
	sch  *jsonschema.Schema
	err  error // set when sch is nil
	// patternWork is the most pattern instructions per byte of args' strings (checkSchemaCost).
	patternWork int
}

// schemaRegistry caches the store's schemas, compiled.
type schemaRegistry struct {
	st store.SchemaStore // nil: the store keeps no registry

	// load is held by the goroutine rereading the store and compiling what changed, so that mu is
	// never held across a store read or a compile.
	load sync.Mutex

	mu        sync.Mutex
	gen       uint64 // bumped by invalidate
	loadedGen uint64 // gen when the cache was last read
	loadedAt  time.Time
	byURI     map[string]*compiledSchema
	byKind    map[string]*compiledSchema // the latest registered per type
}

func newSchemaRegistry(st store.Store) *schemaRegistry {
	ss, _ := st.(store.SchemaStore)
	return &schemaRegistry{st: ss}
}

// refuseLoads keeps a schema from reading files or the network through $ref.
type refuseLoads struct{}

func (refuseLoads) Load(u string) (any, error) {
	return nil, fmt.Errorf("schemas cannot refer to other documents (%s): put them in $defs", u)
}

// compileSchema compiles a JSON Schema document (draft 2020-12 unless $schema names another),
// refusing one beyond the limits of schemalimits.go: too large or deep to compile quickly, or
// whose references loop, whose patterns are too large, or that cost too much to validate with. It
// returns the schema's pattern work (checkSchemaCost).
func compileSchema(doc json.RawMessage) (*jsonschema.Schema, int, error) {
	if err := checkSchemaShape(doc); err != nil {
		return nil, 0, err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, 0, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(refuseLoads{})
	c.UseRegexpEngine(compileBoundedRegexp)
	if err := c.AddResource(schemaURL, v); err != nil {
		return nil, 0, err
	}
	sch, err := c.Compile(schemaURL)
	if err != nil {
		return nil, 0, err
	}
	work, err := checkSchemaCost(sch)
	if err != nil {
		return nil, 0, err
	}
	return sch, work, nil
}

// invalidate makes the next lookup reread the store.
func (sr *schemaRegistry) invalidate() {
	sr.mu.Lock()
	sr.gen++
	sr.mu.Unlock()
}

// lookup returns the schema a job is validated against: the one named by uri, else the latest
// registered for kind, else nil. It rereads the registry when the cache is older than
// schemaCacheTTL, or was invalidated. While one goroutine rereads a cache that merely aged, the
// others answer from it rather than wait.
func (sr *schemaRegistry) lookup(ctx context.Context, kind, uri string) (*compiledSchema, error) {
	if sr.st == nil {
		return nil, nil
	}
	sr.mu.Lock()
	byURI, byKind := sr.byURI, sr.byKind
	current := sr.loadedGen == sr.gen && byURI != nil
	fresh := current && time.Since(sr.loadedAt) <= schemaCacheTTL
	sr.mu.Unlock()
	if !fresh {
		if current && !sr.load.TryLock() {
			return pickSchema(byURI, byKind, kind, uri), nil // another goroutine is rereading
		} else if !current {
			sr.load.Lock()
		}
		var err error
		byURI, byKind, err = sr.reload(ctx)
		sr.load.Unlock()
		if err != nil {
			return nil, err
		}
	}
	return pickSchema(byURI, byKind, kind, uri), nil
}

func pickSchema(byURI, byKind map[string]*compiledSchema, kind, uri string) *compiledSchema {
	if uri != "" {
		return byURI[uri]
	}
	return byKind[kind]
}

// reload rereads the store, unless another goroutine just did, and compiles the schemas that are
// not in the cache yet. The caller holds sr.load.
func (sr *schemaRegistry) reload(ctx context.Context) (map[string]*compiledSchema, map[string]*compiledSchema, error) {
	sr.mu.Lock()
	gen, old := sr.gen, sr.byURI
	if sr.loadedGen == gen && old != nil && time.Since(sr.loadedAt) <= schemaCacheTTL {
		defer sr.mu.Unlock()
		return sr.byURI, sr.byKind, nil
	}
	sr.mu.Unlock()
	list, err := sr.st.SchemaList(ctx)
	if err != nil {
		return nil, nil, err
	}
	byURI := make(map[string]*compiledSchema, len(list))
	byKind := map[string]*compiledSchema{}
	for _, js := range list {
		cs := old[js.URI]
		if cs == nil || !sameRegistration(cs.meta, js) {
			sch, work, err := compileSchema(js.Schema)
			cs = &compiledSchema{meta: js, sch: sch, err: err, patternWork: work}
		}
		byURI[js.URI] = cs
		byKind[js.Kind] = cs // the list is oldest first: the latest wins
	}
	sr.mu.Lock()
	sr.byURI, sr.byKind = byURI, byKind
	if sr.gen == gen { // else invalidated while reading: the next lookup reads again
		sr.loadedGen, sr.loadedAt = gen, time.Now()
	}
	sr.mu.Unlock()
	return byURI, byKind, nil
}

// sameRegistration reports whether a cached schema is the registration the store lists: a URI
// deleted and registered again, even with the same document, is another registration.
func sameRegistration(a, b *store.JobSchema) bool {
	return a.URI == b.URI && a.Kind == b.Kind && a.Version == b.Version && a.CreatedAt.Equal(b.CreatedAt) &&
		bytes.Equal(a.Schema, b.Schema)
}

// checkArgs validates a decoded job's args against its schema. field prefixes the error's field (a
// batch's "jobs[3]").
func (s *Server) checkArgs(ctx context.Context, req *enqueueRequest, field string) *apiError {
	if s.schemas.st == nil {
		return nil
	}
	uri := ""
	if raw, ok := req.ext.Unknown["schema"]; ok && !isNull(raw) {
		var e *apiError
		if uri, e = wantString(raw, "schema"); e != nil {
			return e
		}
	}
	cs, err := s.schemas.lookup(ctx, req.job.Kind, uri)
	if err != nil {
		return fromClientError(err, "schema", uri)
	}
	if cs == nil {
		if uri != "" {
			return unprocessable(prefixField(field, "schema"), "schema %q is not registered", uri)
		}
		return nil
	}
	if cs.meta.Kind != req.job.Kind {
		return unprocessable(prefixField(field, "schema"), "schema %q is for type %s, not %s", uri, cs.meta.Kind, req.job.Kind)
	}
	if cs.err != nil {
		// The args are not at fault: say what is wrong with the schema.
		return unprocessable(prefixField(field, "schema"), "schema %q (type %s) cannot be used: %v; delete it and register a corrected one", cs.meta.URI, cs.meta.Kind, cs.err)
	}
	args := req.job.Args
	if len(args) == 0 {
		args = json.RawMessage("[]")
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return invalid(prefixField(field, "args"), "args are not JSON: %v", err)
	}
	if cs.patternWork > 0 {
		// Validate cannot be stopped: refuse what its patterns could not match in bounded time.
		if n := stringBytes(inst); n*cs.patternWork > schemaMaxMatchWork {
			return unprocessable(prefixField(field, "args"), "args hold %d bytes of strings (names counted twice), "+
				"more than the %d schema %q allows: its patterns cost up to %d steps per byte, and validation is bounded to %d steps",
				n, schemaMaxMatchWork/cs.patternWork, cs.meta.URI, cs.patternWork, schemaMaxMatchWork)
		}
	}
	err = cs.sch.Validate(inst)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return unprocessable(prefixField(field, "args"), "args do not conform to schema %q: %v", cs.meta.URI, err)
	}
	if cycle := findRefCycle(ve); cycle != nil {
		// Registration refuses such schemas; should one get through, blame it, not the args, in the
		// library's words (its basic output says only "validation failed").
		return unprocessable(prefixField(field, "schema"), "schema %q cannot be used: %s", cs.meta.URI, cycle.Error())
	}
	var problems []map[string]any
	first := ""
	for _, u := range ve.BasicOutput().Errors {
		if u.Error == nil || len(problems) == 10 {
			continue
		}
		path := argsPath(u.InstanceLocation)
		if first == "" {
			first = path + ": " + u.Error.String()
		}
		problems = append(problems, map[string]any{"path": path, "message": u.Error.String()})
	}
	if first == "" {
		first = "args: " + ve.Error()
	}
	e := unprocessable(prefixField(field, "args"), "args do not conform to schema %q: %s", cs.meta.URI, first)
	e.code = CodeSchemaValidationFailed
	e.details["schema"] = cs.meta.URI
	if len(problems) > 0 {
		e.details["field"] = prefixField(field, problems[0]["path"].(string))
		e.details["errors"] = problems
	}
	return e
}

// stringBytes counts the bytes of a decoded JSON value's strings, its names twice.
func stringBytes(v any) int {
	switch v := v.(type) {
	case string:
		return len(v)
	case []any:
		n := 0
		for _, x := range v {
			n += stringBytes(x)
		}
		return n
	case map[string]any:
		n := 0
		for k, x := range v {
			n += 2*len(k) + stringBytes(x)
		}
		return n
	}
	return 0
}

// findRefCycle returns the error in ve's tree that reports a reference cycle, if any.
func findRefCycle(ve *jsonschema.ValidationError) *jsonschema.ValidationError {
	if _, ok := ve.ErrorKind.(*kind.RefCycle); ok {
		return ve
	}
	for _, c := range ve.Causes {
		if found := findRefCycle(c); found != nil {
			return found
		}
	}
	return nil
}

func prefixField(prefix, f string) string {
	if prefix == "" {
		return f
	}
	return prefix + "." + f
}

// argsPath turns a JSON pointer into args ("/0/to") into the field naming pronto uses ("args[0].to").
func argsPath(ptr string) string {
	var b strings.Builder
	b.WriteString("args")
	if ptr == "" || ptr == "/" {
		return b.String()
	}
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		if _, err := strconv.Atoi(tok); err == nil {
			b.WriteString("[" + tok + "]")
		} else {
			b.WriteString("." + tok)
		}
	}
	return b.String()
}

// routeSchemas serves /ojs/v1/schemas and /ojs/v1/schemas/{uri}. The URI is taken from the escaped
// path, so that one holding "/" (sent as %2F, as §15.3 requires) stays one segment.
func (s *Server) routeSchemas(w http.ResponseWriter, r *http.Request, seg []string) {
	if s.schemas.st == nil {
		s.writeError(w, r, errorf(http.StatusNotImplemented, CodeUnsupported, "this store keeps no schema registry"))
		return
	}
	if len(seg) == 1 {
		switch r.Method {
		case http.MethodGet:
			s.listSchemas(w, r)
		case http.MethodPost:
			s.registerSchema(w, r)
		default:
			s.writeError(w, r, methodNotAllowed(r, "GET", "POST"))
		}
		return
	}
	raw := strings.TrimPrefix(r.URL.EscapedPath(), "/ojs/v1/schemas/")
	uri, err := url.PathUnescape(raw)
	if err != nil || uri == "" || len(uri) > 1024 || !printable(uri) {
		s.writeError(w, r, invalid("uri", "schema uri %q: send it URL-encoded, 1 to 1024 printable characters", raw))
		return
	}
	switch r.Method {
	case http.MethodGet:
		s.getSchema(w, r, uri)
	case http.MethodDelete:
		s.deleteSchema(w, r, uri)
	default:
		s.writeError(w, r, methodNotAllowed(r, "GET", "DELETE"))
	}
}

// decodeSchema reads a registration {uri, type, version, schema} and compiles the schema.
func decodeSchema(body []byte, now time.Time) (*store.JobSchema, *apiError) {
	m, e := decodeBody(body, "schema registration")
	if e != nil {
		return nil, e
	}
	js := &store.JobSchema{CreatedAt: now}
	for _, mb := range m {
		switch mb.key {
		case "uri", "type", "version", "schema", "created_at":
		default:
			return nil, invalid(mb.key, "%s is not a field of a schema registration (uri, type, version, schema)", mb.key)
		}
	}
	req := func(k string) (json.RawMessage, *apiError) {
		v, ok := m.get(k)
		if !ok || isNull(v) {
			return nil, invalid(k, "%s is required", k)
		}
		return v, nil
	}
	v, e := req("uri")
	if e != nil {
		return nil, e
	}
	if js.URI, e = wantString(v, "uri"); e != nil {
		return nil, e
	}
	if js.URI == "" || len(js.URI) > 1024 || !printable(js.URI) {
		return nil, invalid("uri", "uri must be 1 to 1024 printable characters without spaces")
	}
	if v, e = req("type"); e != nil {
		return nil, e
	}
	if js.Kind, e = wantString(v, "type"); e != nil {
		return nil, e
	}
	if !pronto.ValidKind(js.Kind) {
		return nil, invalid("type", "type %q: must be dot-separated segments of [a-z][a-z0-9_-]*", js.Kind)
	}
	if v, e = req("version"); e != nil {
		return nil, e
	}
	switch k := jsonKind(v); k {
	case "number", "string":
		if k == "string" {
			if s, _ := wantString(v, "version"); s == "" || len(s) > 64 {
				return nil, invalid("version", "version must be a number or a string of 1 to 64 bytes")
			}
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, v); err != nil || buf.Len() > 66 {
			return nil, invalid("version", "version must be a number or a string of 1 to 64 bytes")
		}
		js.Version = buf.String()
	default:
		return nil, invalid("version", "version must be a number or a string, not %s", k)
	}
	if v, e = req("schema"); e != nil {
		return nil, e
	}
	if jsonKind(v) != "object" {
		return nil, invalid("schema", "schema must be a JSON Schema object, not %s", jsonKind(v))
	}
	if _, _, err := compileSchema(v); err != nil {
		e := invalid("schema", "the provided JSON Schema is not valid: %v", err)
		e.details["schema_error"] = err.Error()
		return nil, e
	}
	js.Schema = bytes.Clone(v)
	return js, nil
}

// appendSchema appends a schema object; with the document when full.
func appendSchema(b []byte, js *store.JobSchema, full bool) []byte {
	b = append(b, '{')
	b = appendStringField(b, "uri", js.URI)
	b = appendStringField(b, "type", js.Kind)
	b = appendRawField(b, "version", []byte(js.Version))
	if full {
		b = appendRawField(b, "schema", js.Schema)
	}
	b = appendTimeField(b, "created_at", js.CreatedAt)
	return append(b, '}')
}

// POST /ojs/v1/schemas
func (s *Server) registerSchema(w http.ResponseWriter, r *http.Request) {
	js, ok := readRequest(s, w, r, "schema registration", func(body []byte) (*store.JobSchema, *apiError) {
		return decodeSchema(body, time.Now().UTC())
	})
	if !ok {
		return
	}
	if err := s.schemas.st.SchemaCreate(r.Context(), js); err != nil {
		s.writeError(w, r, fromClientError(err, "schema", js.URI))
		return
	}
	s.schemas.invalidate()
	w.Header().Set("Location", "/ojs/v1/schemas/"+url.PathEscape(js.URI))
	b := getBuf()
	*b = append(*b, `{"schema":`...)
	*b = appendSchema(*b, js, false)
	*b = append(*b, '}')
	writeBuf(w, http.StatusCreated, b)
}

// GET /ojs/v1/schemas?limit=&offset=
func (s *Server) listSchemas(w http.ResponseWriter, r *http.Request) {
	limit, offset, e := pageParams(r)
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	list, err := s.schemas.st.SchemaList(r.Context())
	if err != nil {
		s.writeError(w, r, fromClientError(err, "schema", ""))
		return
	}
	page := list[min(offset, len(list)):]
	page = page[:min(limit, len(page))]
	b := getBuf()
	*b = append(*b, `{"schemas":[`...)
	for i, js := range page {
		if i > 0 {
			*b = append(*b, ',')
		}
		*b = appendSchema(*b, js, false)
	}
	*b = append(*b, ']')
	*b = append(appendKey(*b, "pagination"), '{')
	*b = appendIntField(*b, "total", int64(len(list)))
	*b = appendIntField(*b, "limit", int64(limit))
	*b = appendIntField(*b, "offset", int64(offset))
	*b = appendBoolField(*b, "has_more", offset+len(page) < len(list))
	*b = append(*b, '}', '}')
	writeBuf(w, http.StatusOK, b)
}

// pageParams reads limit (1 to 1000, default 50) and offset (default 0).
func pageParams(r *http.Request) (int, int, *apiError) {
	q := r.URL.Query()
	limit, offset := 50, 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return 0, 0, invalid("limit", "limit %q: must be an integer from 1 to 1000", v)
		}
		limit = n
	}
	if v := q.Get("offset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, 0, invalid("offset", "offset %q: must be a non-negative integer", v)
		}
		offset = n
	}
	return limit, offset, nil
}

// GET /ojs/v1/schemas/{uri}
func (s *Server) getSchema(w http.ResponseWriter, r *http.Request, uri string) {
	js, err := s.schemas.st.SchemaGet(r.Context(), uri)
	if err != nil {
		s.writeError(w, r, fromClientError(err, "schema", uri))
		return
	}
	b := getBuf()
	*b = append(*b, `{"schema":`...)
	*b = appendSchema(*b, js, true)
	*b = append(*b, '}')
	writeBuf(w, http.StatusOK, b)
}

// DELETE /ojs/v1/schemas/{uri}
func (s *Server) deleteSchema(w http.ResponseWriter, r *http.Request, uri string) {
	js, err := s.schemas.st.SchemaDelete(r.Context(), uri)
	if err != nil {
		s.writeError(w, r, fromClientError(err, "schema", uri))
		return
	}
	s.schemas.invalidate()
	b := getBuf()
	*b = append(*b, '{')
	*b = appendBoolField(*b, "deleted", true)
	*b = appendStringField(*b, "uri", js.URI)
	*b = append(*b, '}')
	writeBuf(w, http.StatusOK, b)
}
