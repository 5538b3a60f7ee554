package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/pronto-jobs/pronto/store"
)

var _ store.SchemaStore = (*Store)(nil)

type schemaTable struct {
	mu    sync.Mutex
	byURI map[string]*store.JobSchema
}

// schemas returns the store's schema registry, making the table on first use.
func (s *Store) schemas() *schemaTable {
	s.sideMu.Lock()
	defer s.sideMu.Unlock()
	if s.schemaT == nil {
		s.schemaT = &schemaTable{byURI: make(map[string]*store.JobSchema)}
	}
	return s.schemaT
}

func cloneSchema(js *store.JobSchema) *store.JobSchema {
	out := *js
	out.Schema = slices.Clone(js.Schema)
	return &out
}

// SchemaCreate stores a new schema; an existing URI gives store.ErrDuplicate.
func (s *Store) SchemaCreate(_ context.Context, js *store.JobSchema) error {
	t := s.schemas()
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.byURI[js.URI]; ok {
		return fmt.Errorf("create schema %q: %w", js.URI, store.ErrDuplicate)
	}
	t.byURI[js.URI] = cloneSchema(js)
	return nil
}

// SchemaGet returns the schema with uri, or store.ErrNotFound.
func (s *Store) SchemaGet(_ context.Context, uri string) (*store.JobSchema, error) {
	t := s.schemas()
	t.mu.Lock()
	defer t.mu.Unlock()
	js, ok := t.byURI[uri]
	if !ok {
		return nil, fmt.Errorf("schema %q: %w", uri, store.ErrNotFound)
	}
	return cloneSchema(js), nil
}

// SchemaList returns every schema, oldest first.
func (s *Store) SchemaList(_ context.Context) ([]*store.JobSchema, error) {
	t := s.schemas()
	t.mu.Lock()
	out := make([]*store.JobSchema, 0, len(t.byURI))
	for _, js := range t.byURI {
		out = append(out, cloneSchema(js))
	}
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b *store.JobSchema) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.URI, b.URI))
	})
	return out, nil
}

// SchemaDelete removes the schema with uri and returns it, or gives store.ErrNotFound.
func (s *Store) SchemaDelete(_ context.Context, uri string) (*store.JobSchema, error) {
	t := s.schemas()
	t.mu.Lock()
	defer t.mu.Unlock()
	js, ok := t.byURI[uri]
	if !ok {
		return nil, fmt.Errorf("delete schema %q: %w", uri, store.ErrNotFound)
	}
	delete(t.byURI, uri)
	return js, nil
}
