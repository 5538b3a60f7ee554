package postgres

import (
	"context"
	"fmt"

	"github.com/pronto-jobs/pronto/store"
)

var _ store.WriteProbe = (*Store)(nil)

// probeWritableSQL asks, in one read, the two ways a server that answers takes no writes: it is in
// recovery (a standby), or a session's transactions start read-only (default_transaction_read_only
// set by ALTER SYSTEM and a reload, as failover tools fence a demoted primary, or for the role). The
// setting is read in the statement's own implicit transaction, so it is the one a write would get.
const probeWritableSQL = `SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on'`

// ProbeWritable reports whether the server takes writes now (store.WriteProbe): one statement that
// reads two settings, with no lock. A server in recovery or whose transactions are read-only gets an
// error wrapping store.ErrReadOnly; one that cannot be asked gets pgx's error.
func (s *Store) ProbeWritable(ctx context.Context) error {
	var recovery, readOnly bool
	if err := s.pool.QueryRow(ctx, probeWritableSQL).Scan(&recovery, &readOnly); err != nil {
		return fmt.Errorf("postgres store: probe for writes: %w", err)
	}
	switch {
	case recovery:
		return store.ReadOnlyError("postgres store: the server is in recovery (a standby, or a primary not yet promoted)")
	case readOnly:
		return store.ReadOnlyError("postgres store: transactions are read-only (default_transaction_read_only is on: a primary fenced by a failover tool, or a setting of the role or database)")
	}
	return nil
}
