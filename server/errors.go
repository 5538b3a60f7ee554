package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/jsoncheck"
	"github.com/pronto-jobs/pronto/store"
)

// Error codes of OJS error bodies. The first group is the OJS standard vocabulary; the second names
// HTTP-level refusals the standard has no code for.
const (
	CodeInvalidRequest = "invalid_request"
	CodeInvalidPayload = "invalid_payload"
	CodeNotFound       = "not_found"
	CodeConflict       = "conflict"
	CodeDuplicate      = "duplicate"
	CodeBackendError   = "backend_error"
	CodeUnsupported    = "unsupported"

	CodeUnauthenticated  = "unauthenticated"
	CodePayloadTooLarge  = "payload_too_large"
	CodeMethodNotAllowed = "method_not_allowed"
)

// docsURL is where error bodies point for more help.
const docsURL = "https://github.com/pronto-jobs/pronto/blob/main/docs/http-api.md"

// apiError is an error answered with an OJS error body:
// {"error": {"code", "message", "retryable", "details", "request_id"}}.
type apiError struct {
	status    int
	code      string
	message   string
	retryable bool
	// typ, when set, is sent as error.type ("validation_error" for refused input).
	typ     string
	details map[string]any
	hint    string
	// headers are set on the response (Retry-After on 429).
	headers map[string]string
	// cause is the store's error behind a backend_error, for writeError to tell an unreachable
	// backend (503) from a failure (500).
	cause error
}

func (e *apiError) Error() string { return e.message }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

// invalid is a 400 invalid_request about one field.
func invalid(field, format string, args ...any) *apiError {
	e := errorf(http.StatusBadRequest, CodeInvalidRequest, format, args...)
	e.typ = "validation_error"
	if field != "" {
		e.details = map[string]any{"field": field}
	}
	return e
}

// unprocessable is a 422 for input that is well formed but not acceptable (a retry policy OJS forbids).
func unprocessable(field, format string, args ...any) *apiError {
	e := invalid(field, format, args...)
	e.status = http.StatusUnprocessableEntity
	return e
}

func notFound(kind, id string) *apiError {
	e := errorf(http.StatusNotFound, CodeNotFound, "%s %q not found", kind, id)
	e.details = map[string]any{"resource_type": kind, "resource_id": id}
	e.hint = "check the identifier; finished jobs are deleted after their retention period"
	return e
}

func conflict(format string, args ...any) *apiError {
	return errorf(http.StatusConflict, CodeConflict, format, args...)
}

// fromClientError maps an error of the pronto client to its OJS error.
func fromClientError(err error, kind, id string) *apiError {
	var ae *apiError
	var te *pronto.TransitionError
	var uce *pronto.UniqueConflictError
	var mte *pronto.MetaTooLargeError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &mte):
		return metaTooLarge("meta", mte) // over the client's own MaxMetaBytes
	case errors.As(err, &uce):
		return uniqueConflict(uce)
	case errors.Is(err, pronto.ErrQueueFull):
		return queueFull(err)
	case errors.Is(err, pronto.ErrTenantLimit):
		return tenantLimitExceeded(err)
	case errors.As(err, &te):
		e := conflict("cannot %s %s %s in state %q", te.Operation, kind, id, te.From)
		e.details = map[string]any{"job_id": id, "current_state": string(te.From)}
		return e
	case errors.Is(err, pronto.ErrNotFound):
		return notFound(kind, id)
	case errors.Is(err, pronto.ErrDuplicate):
		e := errorf(http.StatusConflict, CodeDuplicate, "a %s with id %q already exists", kind, id)
		return e
	case errors.Is(err, pronto.ErrInvalidArgs), errors.Is(err, store.ErrInvalidParams):
		var ce *jsoncheck.Error
		if errors.As(err, &ce) {
			return invalid(ce.Path, "%s", trimPrefix(err.Error()))
		}
		return invalid("", "%s", trimPrefix(err.Error()))
	case errors.Is(err, pronto.ErrUnsupported):
		return errorf(http.StatusUnprocessableEntity, CodeUnsupported, "%s", err.Error())
	case errors.Is(err, store.ErrSchemaTooNew):
		// The client halted (pronto.Client.SchemaIncompatible): this older binary must not write in
		// the schema's new shape; a server of the newer release can, so the request is worth retrying.
		e := errorf(http.StatusServiceUnavailable, CodeBackendError, "%s", err.Error())
		e.retryable = true
		e.details = map[string]any{"reason": "schema_too_new"}
		e.headers = map[string]string{"Retry-After": unavailableRetryAfter}
		return e
	}
	if e := inputRefusedByDatabase(err); e != nil {
		return e
	}
	e := errorf(http.StatusInternalServerError, CodeBackendError, "backend error: %v", err)
	e.retryable = true
	e.cause = err
	return e
}

// unavailableRetryAfter is the Retry-After of a 503 for an unreachable backend, in seconds: long
// enough not to hammer a restarting database, short enough for a failover.
const unavailableRetryAfter = "1"

// asUnavailable turns a backend_error whose cause says the store's backend cannot be reached or
// cannot serve now (store.IsUnavailable) into the 503 the HTTP binding (16.2) and the error catalog
// (OJS-2001, BACKEND_UNAVAILABLE, with Retry-After) give it: a client should wait and retry, and a
// load balancer can tell it from a bug. The code stays backend_error, the binding's only code for it.
func (s *Server) asUnavailable(e *apiError) *apiError {
	if e.code != CodeBackendError || e.status != http.StatusInternalServerError || e.cause == nil {
		return e
	}
	if errors.Is(e.cause, context.DeadlineExceeded) {
		// The request's deadline (Config.RequestTimeout) ran out waiting on the store: the binding has
		// no code for it; the error catalog's BACKEND_TIMEOUT is a 504.
		u := *e
		u.status = http.StatusGatewayTimeout
		u.message = "backend timeout: the store did not answer in time: " + strings.TrimPrefix(e.message, "backend error: ")
		u.details = map[string]any{"backend": s.backend, "reason": "timeout"}
		return &u
	}
	if !store.IsUnavailable(s.store, e.cause) {
		return e
	}
	u := *e
	u.status = http.StatusServiceUnavailable
	u.message = "backend unavailable: " + strings.TrimPrefix(e.message, "backend error: ")
	u.details = map[string]any{"backend": s.backend, "reason": s.unavailableReason(e.cause)}
	u.headers = map[string]string{"Retry-After": unavailableRetryAfter}
	return &u
}

// unavailableReason names the backend's condition behind an unavailable error for details.reason:
// an operator or a client library can tell a failover or a migration's lock from a database that
// is down. The names are store.ConditionOf's, the ones health and the dashboard show, so every
// store's conditions (PostgreSQL's SQLSTATEs, Redis's error replies, SQLite's busy, a WriteProbe's
// read-only) are named once, there. A backend that cannot be reached, or that cannot serve for a
// reason ConditionOf does not name, is "unavailable", as the API has always said.
func (s *Server) unavailableReason(err error) string {
	switch c := store.ConditionOf(s.store, err); c {
	case store.ConditionNone, store.ConditionError, store.ConditionUnreachable, store.ConditionTimeout, store.ConditionUnavailable:
		return string(store.ConditionUnavailable)
	default:
		return string(c)
	}
}

// inputRefusedByDatabase is the last line of defence behind the checks at the boundary: a database
// error that the request's data caused (SQLSTATE class 22, data exception; 23, integrity constraint
// violation; 54, program limit exceeded, such as an index row too large) is the client's to fix, so
// it is a 400 (409 for a unique violation), never a retryable 500 an OJS client would retry forever.
func inputRefusedByDatabase(err error) *apiError {
	code, ok := store.RefusedSQLState(err) // the classes the completer alone gives up on, too
	if !ok {
		return nil
	}
	if code == "23505" {
		e := conflict("the request conflicts with data already stored: %v", err)
		e.details = map[string]any{"sqlstate": code}
		return e
	}
	e := invalid("", "the store refused the request's data: %v", err)
	e.details = map[string]any{"sqlstate": code}
	return e
}

// uniqueConflict is the 409 of an insert refused because another job holds its unique key.
func uniqueConflict(uce *pronto.UniqueConflictError) *apiError {
	e := errorf(http.StatusConflict, CodeDuplicate,
		"a job with the same unique key already exists: job %s (%s)", uce.ExistingID, uce.ExistingState)
	e.details = map[string]any{
		"existing_job_id": uce.ExistingID, "existing_job_state": string(uce.ExistingState),
		"uniqueness_key": uce.Key,
	}
	return e
}

// trimPrefix drops the "invalid job: " of pronto.ErrInvalidArgs messages, keeping what is wrong.
func trimPrefix(msg string) string {
	if _, after, ok := strings.Cut(msg, "invalid job: "); ok {
		return after
	}
	return msg
}

// writeError answers e as an OJS error body.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, e *apiError) {
	e = s.asUnavailable(e)
	if e.status >= 500 {
		s.log.Error("pronto serve: request failed", "method", r.Method, "path", r.URL.Path, "err", e.message)
	}
	body := struct {
		Error errorBody `json:"error"`
	}{errorBody{
		Code: e.code, Message: e.message, Retryable: e.retryable, Type: e.typ, Details: e.details,
		RequestID: w.Header().Get("X-Request-Id"), Hint: e.hint,
	}}
	if e.status == http.StatusNotFound {
		body.Error.DocsURL = docsURL
		if body.Error.Hint == "" {
			body.Error.Hint = "see the endpoint list in the docs"
		}
	}
	for k, v := range e.headers {
		w.Header().Set(k, v)
	}
	b, err := json.Marshal(body)
	if err != nil {
		b = []byte(`{"error":{"code":"backend_error","message":"error body could not be encoded","retryable":false}}`)
	}
	writeRaw(w, e.status, b)
}

type errorBody struct {
	Code      string         `json:"code"`
	Message   string         `json:"message"`
	Retryable bool           `json:"retryable"`
	Type      string         `json:"type,omitempty"`
	Details   map[string]any `json:"details,omitempty"`
	RequestID string         `json:"request_id,omitempty"`
	Hint      string         `json:"hint,omitempty"`
	DocsURL   string         `json:"docs_url,omitempty"`
}

// metaTooLarge is the 413 of ojs-payload-limits.md §9.2 for a meta over its limit, its details
// shaped as those of the body limit's payload_too_large.
func metaTooLarge(field string, tl *pronto.MetaTooLargeError) *apiError {
	e := errorf(http.StatusRequestEntityTooLarge, codeMetadataTooLarge,
		"%s is %d bytes serialized, over the limit of %d bytes", field, tl.Size, tl.Limit)
	e.typ = "validation_error"
	e.details = map[string]any{"field": field, "actual_bytes": tl.Size, "max_bytes": tl.Limit}
	return e
}
