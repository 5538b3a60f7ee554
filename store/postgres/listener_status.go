package postgres

import "github.com/pronto-jobs/pronto/store"

var _ store.ListenerStatus = (*Store)(nil)

// ListenerConnected reports whether the notification listener's connection is up now.
func (s *Store) ListenerConnected() bool { return s.ListenerPID() != 0 }
