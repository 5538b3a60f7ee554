package store

import (
	"context"
	"errors"
	"net"
	"strings"
)

// Condition names what a store's error says about its backend, for what operators are shown (the
// dashboard, the health and readiness answers, the CLI). IsUnavailable answers one question for the
// HTTP API (retry later, 503), and a backend that answered "busy" gets the same answer there as one
// that cannot be reached; an operator needs them told apart: a migration holding a lock is not a
// database that is down.
type Condition string

// The conditions ConditionOf tells apart. Their names are those of the HTTP API's details.reason
// where it has one.
const (
	// ConditionNone: no error.
	ConditionNone Condition = ""
	// ConditionUnreachable: the backend cannot be reached, or the connection to it was lost: refused,
	// reset or dropped connections, an unknown host, PostgreSQL shutting down or starting up, the
	// store or its pool closed.
	ConditionUnreachable Condition = "unreachable"
	// ConditionTimeout: the backend did not answer within the caller's deadline (the network's or
	// the request's): whether it is up cannot be told.
	ConditionTimeout Condition = "timeout"
	// ConditionLockTimeout: the backend answered, but a statement waited past lock_timeout for a
	// lock another session holds (as a migration or a long transaction does).
	ConditionLockTimeout Condition = "lock_timeout"
	// ConditionStatementTimeout: the backend answered, but a statement ran past statement_timeout
	// or was cancelled by an operator.
	ConditionStatementTimeout Condition = "statement_timeout"
	// ConditionReadOnly: the backend answered but takes no writes: a standby, or a primary demoted
	// by a failover (PostgreSQL's 25006, Redis's READONLY), or a store's WriteProbe said so
	// (ErrReadOnly).
	ConditionReadOnly Condition = "read_only"
	// ConditionIdleSessionTimeout: the server ended an idle session (idle_session_timeout,
	// idle_in_transaction_session_timeout); the next request connects again.
	ConditionIdleSessionTimeout Condition = "idle_session_timeout"
	// ConditionInsufficientResources: the backend answered but is out of connections, memory or
	// disk (PostgreSQL's class 53, Redis's OOM).
	ConditionInsufficientResources Condition = "insufficient_resources"
	// ConditionBusy: the database file is locked by another connection or process past the busy
	// timeout (SQLite's SQLITE_BUSY or SQLITE_LOCKED): a long write transaction, a checkpoint.
	ConditionBusy Condition = "busy"
	// ConditionLoading: the server is loading its data set into memory after a start (Redis's
	// LOADING); it serves once loaded.
	ConditionLoading Condition = "loading"
	// ConditionBusyScript: a script or function runs past its time limit and holds the server
	// (Redis's BUSY); SCRIPT KILL or FUNCTION KILL ends it.
	ConditionBusyScript Condition = "busy_script"
	// ConditionMasterDown: a replica that lost its link to its master and serves no stale data
	// (Redis's MASTERDOWN).
	ConditionMasterDown Condition = "master_down"
	// ConditionClusterDown: the cluster serves none or not all of its hash slots (Redis's
	// CLUSTERDOWN): nodes down without a failover, or no quorum.
	ConditionClusterDown Condition = "cluster_down"
	// ConditionUnavailable: the backend cannot serve now for a reason of its own that none of the
	// above names (Redis mid-resharding, a pool exhausted).
	ConditionUnavailable Condition = "unavailable"
	// ConditionError: any other error; the backend's condition is not in question.
	ConditionError Condition = "error"
)

// ConditionClassifier is implemented by a store whose client library tells more conditions than the
// generic signs ConditionOf knows. It returns ConditionNone for an error it does not know; ConditionOf
// takes its answer only for an error IsUnavailable reports.
type ConditionClassifier interface {
	Condition(err error) Condition
}

// ConditionOf classifies err, returned by s, by what it says about the backend. It agrees with
// IsUnavailable: every condition but ConditionError (and ConditionNone) is an error IsUnavailable
// reports, or a deadline. s may be nil.
func ConditionOf(s Store, err error) Condition {
	if err == nil {
		return ConditionNone
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return ConditionTimeout
	}
	if errors.Is(err, ErrReadOnly) {
		// A WriteProbe's answer: before the store's classifier, which knows its client's errors only.
		return ConditionReadOnly
	}
	if c, ok := s.(ConditionClassifier); ok {
		// Only an error IsUnavailable reports is named, so that the two never disagree.
		if cond := c.Condition(err); cond != ConditionNone && cond != ConditionError && IsUnavailable(s, err) {
			return cond
		}
	}
	var se interface{ SQLState() string }
	if errors.As(err, &se) {
		if cond := sqlStateCondition(se.SQLState()); cond != ConditionNone {
			return cond
		}
	}
	if cond := redisCondition(err); cond != ConditionNone && IsUnavailable(s, err) {
		return cond
	}
	if genericUnavailable(err) {
		return ConditionUnreachable
	}
	if IsUnavailable(s, err) {
		// The store's own classifier: its closed-pool and connection errors are unreachable, but
		// it cannot say which of its errors those are, so they are named by what is known.
		if isClosedOrConnect(err) {
			return ConditionUnreachable
		}
		return ConditionUnavailable
	}
	return ConditionError
}

// sqlStateCondition is the condition of a PostgreSQL SQLSTATE that unavailableSQLState reports, or
// ConditionNone.
func sqlStateCondition(code string) Condition {
	if !unavailableSQLState(code) {
		return ConditionNone
	}
	switch code {
	case "55P03":
		return ConditionLockTimeout
	case "57014":
		return ConditionStatementTimeout
	case "25006":
		return ConditionReadOnly
	case "57P05", "25P03":
		return ConditionIdleSessionTimeout
	}
	if strings.HasPrefix(code, "53") {
		return ConditionInsufficientResources
	}
	return ConditionUnreachable // class 08, 57P01-57P03: the connection failed or the server is going away
}

// redisCondition reads a Redis error reply (go-redis's errors have a RedisError method) without
// depending on a Redis client here.
func redisCondition(err error) Condition {
	var re interface {
		error
		RedisError()
	}
	if !errors.As(err, &re) {
		return ConditionNone
	}
	msg := re.Error()
	switch {
	case strings.HasPrefix(msg, "READONLY "):
		return ConditionReadOnly
	case strings.HasPrefix(msg, "OOM "):
		return ConditionInsufficientResources
	}
	return ConditionNone
}

// isClosedOrConnect recognises, by their text, the errors of client libraries that export no value
// for them: pgxpool's closed pool, pgconn's failed connect, database/sql's closed database.
func isClosedOrConnect(err error) bool {
	msg := err.Error()
	for _, s := range []string{"closed pool", "failed to connect to", "sql: database is closed", "redis: client is closed"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// Message says what c means in words safe for any page and any log reader: it names no host, user
// or database, as the backend's own error text does.
func (c Condition) Message() string {
	switch c {
	case ConditionNone:
		return ""
	case ConditionUnreachable:
		return "cannot connect to the store"
	case ConditionTimeout:
		return "the store did not answer in time"
	case ConditionLockTimeout:
		return "database busy: lock timeout (a lock held by another session, such as a migration or a long transaction)"
	case ConditionStatementTimeout:
		return "database busy: statement timeout (a statement ran past statement_timeout or was cancelled)"
	case ConditionReadOnly:
		return "database read-only: it takes no writes (a standby, or a primary demoted by a failover?)"
	case ConditionIdleSessionTimeout:
		return "the database ended an idle session (idle session timeout); the next request connects again"
	case ConditionInsufficientResources:
		return "database out of resources (connections, memory or disk)"
	case ConditionBusy:
		return "database busy: the file is locked by another connection past the busy timeout (a long write transaction, a checkpoint or another process)"
	case ConditionLoading:
		return "store loading: the server is loading its data set after a start and serves once loaded"
	case ConditionBusyScript:
		return "store busy: a script runs past its time limit and holds the server (SCRIPT KILL or FUNCTION KILL ends it)"
	case ConditionMasterDown:
		return "store replica without its master: the link to the master is down and stale data is not served"
	case ConditionClusterDown:
		return "store cluster down: the cluster does not serve all its hash slots (nodes down without a failover?)"
	case ConditionUnavailable:
		return "the store cannot serve now (the server's log has the error)"
	}
	return "the store failed (the server's log has the error)"
}

// Reachable reports whether the backend answered: every condition but unreachable and timeout (and
// none) says the database is up and gave an error of its own.
func (c Condition) Reachable() bool {
	switch c {
	case ConditionUnreachable, ConditionTimeout:
		return false
	}
	return true
}

// PerRequest reports whether the condition concerns the one request that met it rather than every
// request: a lock held on the rows or table it touched, a statement of its own that ran too long.
// Other requests (another job of a bulk action) may pass meanwhile.
func (c Condition) PerRequest() bool {
	return c == ConditionLockTimeout || c == ConditionStatementTimeout
}
