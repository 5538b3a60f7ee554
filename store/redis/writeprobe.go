package redis

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto/store"
)

var _ store.WriteProbe = (*Store)(nil)

// ProbeWritable reports whether the server takes writes now (store.WriteProbe): one ROLE, which
// reads the server's replication role and writes nothing. A replica (a URL pointing at one, or a
// master demoted by a failover the client has not followed) answers reads but every write with
// READONLY: it gets an error wrapping store.ErrReadOnly.
//
// A cluster client is not asked: it sends each command to the master of its key's slot, and a node
// demoted by a failover answers MOVED to the new master, which the client follows, so it never keeps
// writing to a replica; a cluster that has no master for a slot answers CLUSTERDOWN, which the
// reads already report. A server that refuses ROLE itself (an ACL without it, the command renamed)
// cannot be asked and is taken as writable, as before this probe: the reads answered.
func (s *Store) ProbeWritable(ctx context.Context) error {
	if _, ok := s.rdb.(*goredis.ClusterClient); ok {
		return nil
	}
	reply, err := s.rdb.Do(ctx, "ROLE").Slice()
	if err != nil {
		var re goredis.Error
		if errors.As(err, &re) {
			return nil // the server's refusal of ROLE, not of writes
		}
		return fmt.Errorf("redis store: probe for writes: %w", err)
	}
	if len(reply) == 0 {
		return nil
	}
	switch role, _ := reply[0].(string); role {
	case "slave", "replica":
		state := "unknown"
		if len(reply) > 3 {
			if st, ok := reply[3].(string); ok {
				state = st
			}
		}
		return store.ReadOnlyError("redis store: the server is a replica (link to its master: %s); writes go to its master", state)
	case "sentinel":
		return store.ReadOnlyError("redis store: the server is a Sentinel, not a data server (give the Sentinel URL form, or the master's address)")
	}
	return nil
}
