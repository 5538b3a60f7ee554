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

// refusedPrefixes are the Redis error replies that the request's own data causes, so that the same
// request gets them every time: a Lua error of one of the store's functions on the values it was
// given (a runtime error carries the function's position, "user_function:<line>:"; a value that is
// no command argument), and an argument that is not a number or overflows one. None of the store's
// functions raises an error of its own: a request they refuse is answered with a status that the
// store turns into an error of its own (store.ErrInvalidParams, ErrDuplicate, a unique conflict).
var refusedPrefixes = []string{
	"ERR user_function:",
	"ERR Lua redis lib command arguments must be ",
	"ERR value is not ",
	"ERR increment or decrement would overflow",
	"ERR increment would produce NaN or Infinity",
}

// Refused reports whether err is Redis refusing the request's own data (refusedPrefixes), beyond
// the store's own store.ErrInvalidParams that store.IsRefused knows (store.RefusalClassifier).
// Every other error may pass when tried again, and is not given up on: a server persisting with
// errors (MISCONF), busy with a script (BUSY), loading (LOADING), a replica (READONLY), full (OOM),
// an ACL not yet granting a command (NOPERM), or an error of the client library.
func (s *Store) Refused(err error) bool {
	var re goredis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	for _, p := range refusedPrefixes {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
