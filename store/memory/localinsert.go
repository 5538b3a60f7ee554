package memory

import "github.com/pronto-jobs/pronto/store"

var _ store.LocalInserter = (*Store)(nil)

// InsertsAreLocal reports true: Insert changes this process's memory, with no round trip, so the
// client writes each insert on its own instead of merging concurrent ones.
func (s *Store) InsertsAreLocal() bool { return true }
