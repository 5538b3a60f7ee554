package store

import (
	"context"
	"encoding/json"
	"time"
)

// JobSchema is a JSON Schema registered for the args of one job type (the OJS schema registry,
// ojs-http-binding.md §15).
type JobSchema struct {
	// URI identifies the schema ("urn:ojs:schema:email.send:v1"); unique.
	URI string
	// Kind is the job type whose args the schema describes.
	Kind string
	// Version is the version as the client gave it, as JSON text: `1` or `"1.0.0"`, so that it is
	// answered in the type it came in.
	Version string
	// Schema is the JSON Schema document.
	Schema json.RawMessage
	// CreatedAt is when the schema was registered.
	CreatedAt time.Time
}

// SchemaStore is implemented by stores that keep a schema registry (all of pronto's stores). It is
// separate from Store so that a third-party store without it keeps working; the registry is then
// unavailable.
type SchemaStore interface {
	// SchemaCreate stores a new schema; an existing URI gives ErrDuplicate.
	SchemaCreate(ctx context.Context, s *JobSchema) error
	// SchemaGet returns the schema with uri, or ErrNotFound.
	SchemaGet(ctx context.Context, uri string) (*JobSchema, error)
	// SchemaList returns every schema, oldest first (ties by URI).
	SchemaList(ctx context.Context) ([]*JobSchema, error)
	// SchemaDelete removes the schema with uri and returns it as it was, or gives ErrNotFound.
	SchemaDelete(ctx context.Context, uri string) (*JobSchema, error)
}
