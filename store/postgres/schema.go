package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pronto-jobs/pronto/store"
)

var _ store.SchemaStore = (*Store)(nil)

// The schema registry lives in {schema}.schemas (migration 007). Its statements are not among the
// prepared queries: they run once per command, never on a job's path.

const schemaCols = `uri, kind, version, body, created_at`

func scanSchema(row pgx.Row) (*store.JobSchema, error) {
	var (
		js   store.JobSchema
		body string
	)
	if err := row.Scan(&js.URI, &js.Kind, &js.Version, &body, &js.CreatedAt); err != nil {
		return nil, err
	}
	js.Schema = []byte(body)
	js.CreatedAt = js.CreatedAt.UTC()
	return &js, nil
}

// SchemaCreate stores a new schema; an existing URI gives store.ErrDuplicate.
func (s *Store) SchemaCreate(ctx context.Context, js *store.JobSchema) error {
	q := s.expand.Replace(`INSERT INTO {schema}.schemas (` + schemaCols + `) VALUES ($1, $2, $3, $4, $5)`)
	if _, err := s.pool.Exec(ctx, q, js.URI, js.Kind, js.Version, string(js.Schema), js.CreatedAt); err != nil {
		if isUniqueViolation(err) {
			return fmt.Errorf("create schema %q: %w", js.URI, store.ErrDuplicate)
		}
		return fmt.Errorf("create schema %q: %w", js.URI, err)
	}
	return nil
}

// SchemaGet returns the schema with uri, or store.ErrNotFound.
func (s *Store) SchemaGet(ctx context.Context, uri string) (*store.JobSchema, error) {
	q := s.expand.Replace(`SELECT ` + schemaCols + ` FROM {schema}.schemas WHERE uri = $1`)
	return scanOne(s.pool.QueryRow(ctx, q, uri), scanSchema, fmt.Sprintf("schema %q", uri))
}

// SchemaList returns every schema, oldest first.
func (s *Store) SchemaList(ctx context.Context) ([]*store.JobSchema, error) {
	q := s.expand.Replace(`SELECT ` + schemaCols + ` FROM {schema}.schemas ORDER BY created_at, uri`)
	rows, err := s.pool.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("list schemas: %w", err)
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
	q := s.expand.Replace(`DELETE FROM {schema}.schemas WHERE uri = $1 RETURNING ` + schemaCols)
	return scanOne(s.pool.QueryRow(ctx, q, uri), scanSchema, fmt.Sprintf("delete schema %q", uri))
}
