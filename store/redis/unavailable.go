package redis

import (
	"errors"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// unavailablePrefixes are the Redis error replies of a server that cannot serve now but will: loading
// its data set, a replica without its master, a cluster without quorum or mid-resharding, a replica
// promoted away from under a write, a script running too long, a server over maxmemory (full until
// retention or an operator frees memory, as PostgreSQL's disk_full is class 53).
var unavailablePrefixes = []string{"LOADING ", "MASTERDOWN ", "CLUSTERDOWN ", "TRYAGAIN ", "READONLY ", "BUSY ", "OOM "}

// Unavailable reports whether err means Redis cannot be reached or cannot serve now: go-redis's
// pool timed out or closed, a cluster node's connection lost under a command (ErrReplyLost), or one
// of the error replies above (store.UnavailableClassifier).
func (s *Store) Unavailable(err error) bool {
	if errors.Is(err, goredis.ErrPoolTimeout) || errors.Is(err, goredis.ErrClosed) || errors.Is(err, ErrReplyLost) {
		return true
	}
	var re goredis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	for _, p := range unavailablePrefixes {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
