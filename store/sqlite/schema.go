package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

var _ store.SchemaStore = (*Store)(nil)

// The schema registry lives in the pronto_schemas table (migration 005); created_at is unix
// microseconds, like the jobs table's times.

const schemaColumns = `uri, kind, version, body, created_at`

func scanSchema(rs interface{ Scan(...any) error }) (*store.JobSchema, error) {
	var (
		js      store.JobSchema
		body    string
		created int64
	)
	if err := rs.Scan(&js.URI, &js.Kind, &js.Version, &body, &created); err != nil {
		return nil, err
	}
	js.Schema = []byte(body)
	js.CreatedAt = time.UnixMicro(created).UTC()
	return &js, nil
}

// SchemaCreate stores a new schema; an existing URI gives store.ErrDuplicate.
func (s *Store) SchemaCreate(ctx context.Context, js *store.JobSchema) error {
	return s.insertNew(ctx, fmt.Sprintf("create schema %q", js.URI), `INSERT INTO pronto_schemas (`+schemaColumns+`)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT (uri) DO NOTHING`,
		js.URI, js.Kind, js.Version, string(js.Schema), js.CreatedAt.UnixMicro())
}

// SchemaGet returns the schema with uri, or store.ErrNotFound.
func (s *Store) SchemaGet(ctx context.Context, uri string) (*store.JobSchema, error) {
	js, err := scanSchema(s.r.QueryRowContext(ctx, `SELECT `+schemaColumns+` FROM pronto_schemas WHERE uri = ?`, uri))
	if err != nil {
		return nil, s.rowError(fmt.Sprintf("schema %q", uri), err)
	}
	return js, nil
}

// SchemaList returns every schema, oldest first.
func (s *Store) SchemaList(ctx context.Context) ([]*store.JobSchema, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+schemaColumns+` FROM pronto_schemas ORDER BY created_at, uri`)
	if err != nil {
		return nil, fmt.Errorf("list schemas: %w", s.schemaHint(err))
	}
	defer rows.Close()
	var out []*store.JobSchema
	for rows.Next() {
		js, err := scanSchema(rows)
		if err != nil {
			return nil, fmt.Errorf("list schemas: %w", err)
		}
		out = append(out, js)
	}
	return out, rows.Err()
}

// SchemaDelete removes the schema with uri and returns it, or gives store.ErrNotFound.
func (s *Store) SchemaDelete(ctx context.Context, uri string) (*store.JobSchema, error) {
	js, err := scanSchema(s.w.QueryRowContext(ctx, `DELETE FROM pronto_schemas WHERE uri = ? RETURNING `+schemaColumns, uri))
	if err != nil {
		return nil, s.rowError(fmt.Sprintf("delete schema %q", uri), err)
	}
	return js, nil
}
