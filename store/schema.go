package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Sentinel errors of a schema that does not match the running binary, matched by *SchemaError.
var (
	// ErrSchemaNotMigrated: migrations this binary needs are not applied (run pronto migrate up).
	ErrSchemaNotMigrated = errors.New("schema not migrated")
	// ErrSchemaTooNew: the schema has migrations applied that this binary does not know, so it was
	// migrated by a newer version of pronto.
	ErrSchemaTooNew = errors.New("schema is newer than this binary")
)

// SchemaChecker is implemented by stores with a versioned schema (PostgreSQL, SQLite). pronto's
// Client calls it once at Start, and on the first failed insert of a client that never started, so
// an unmigrated database fails with a clear error instead of "relation does not exist".
type SchemaChecker interface {
	// CheckSchema returns nil when every migration this binary knows is applied and no other is,
	// a *SchemaError when not, or another error when the schema cannot be read.
	CheckSchema(ctx context.Context) error
}

// NewerMigrationsReader is implemented by stores with a versioned schema (PostgreSQL, SQLite). A
// started pronto Client calls it every few seconds, so that a migration marked incompatible with
// older binaries, applied while it runs (pronto migrate up --force, or Store.Migrate, which does
// not check for live clients), stops it claiming jobs on a schema it does not know.
type NewerMigrationsReader interface {
	// NewerMigrations lists the migrations applied to the schema that this binary does not know,
	// oldest first: those marked compatible with older binaries, and the others (marked
	// incompatible, or recorded by a binary that predates the marks). Both are empty when the
	// schema has none, or has no migrations table.
	NewerMigrations(ctx context.Context) (compatible, incompatible []Migration, err error)
}

// SchemaError says how a store's schema differs from the migrations this binary knows. It matches
// ErrSchemaNotMigrated (some are missing) and ErrSchemaTooNew (unknown ones are applied) with
// errors.Is.
type SchemaError struct {
	// Where names the schema for people: `PostgreSQL schema "pronto"`, `SQLite database jobs.db`.
	Where string
	// Known is how many migrations this binary knows.
	Known int
	// Missing lists the known migrations that are not applied, oldest first.
	Missing []Migration
	// Unknown lists the applied migration versions this binary does not know, in order.
	Unknown []int
}

// CheckMigrations returns the *SchemaError of a schema whose migrations are ms (every one this
// binary knows, with whether it is applied) and which also has the versions in unknown applied, or
// nil when they match. Backends call it from CheckSchema.
func CheckMigrations(where string, ms []Migration, unknown []int) error {
	e := &SchemaError{Where: where, Known: len(ms), Unknown: unknown}
	for _, m := range ms {
		if !m.Applied {
			e.Missing = append(e.Missing, m)
		}
	}
	if len(e.Missing) == 0 && len(e.Unknown) == 0 {
		return nil
	}
	return e
}

// RefuseNewer returns the *SchemaError of a schema that has applied (version -> when) versions
// that known (this binary's) lacks, or nil when it has none. A rollback by this binary must refuse
// such a schema: the unknown migrations may depend on the ones it would revert.
func RefuseNewer(where string, known []int, applied map[int]time.Time) error {
	var unknown []int
	for v := range applied {
		if !slices.Contains(known, v) {
			unknown = append(unknown, v)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	return &SchemaError{Where: where, Known: len(known), Unknown: unknown}
}

// Error says what is wrong and what to run.
func (e *SchemaError) Error() string {
	if len(e.Unknown) > 0 {
		versions := make([]string, len(e.Unknown))
		for i, v := range e.Unknown {
			versions[i] = fmt.Sprintf("%03d", v)
		}
		return fmt.Sprintf("%v: %s has migration(s) %s applied, which this version of pronto does not know; "+
			"upgrade pronto, or roll them back with the newer binary's pronto migrate down",
			ErrSchemaTooNew, e.Where, strings.Join(versions, ", "))
	}
	if len(e.Missing) == e.Known {
		return fmt.Sprintf("%v: run pronto migrate up (%s has none of pronto's %d migrations)", ErrSchemaNotMigrated, e.Where, e.Known)
	}
	names := make([]string, len(e.Missing))
	for i, m := range e.Missing {
		names[i] = fmt.Sprintf("%03d_%s", m.Version, m.Name)
	}
	return fmt.Sprintf("%v: run pronto migrate up (%s lacks %d of %d migrations: %s)",
		ErrSchemaNotMigrated, e.Where, len(e.Missing), e.Known, strings.Join(names, ", "))
}

// Is matches ErrSchemaNotMigrated when migrations are missing and ErrSchemaTooNew when unknown ones
// are applied.
func (e *SchemaError) Is(target error) bool {
	switch target {
	case ErrSchemaNotMigrated:
		return len(e.Missing) > 0
	case ErrSchemaTooNew:
		return len(e.Unknown) > 0
	}
	return false
}

// DataLoss is data a down migration deletes: the rows of a table it drops, or the rows with a
// value in a column it drops.
type DataLoss struct {
	// Migration is the migration whose rollback drops it.
	Migration Migration
	// Table is the table, Column the column (empty when the whole table is dropped).
	Table  string
	Column string
	// Rows counts the table's rows, or the rows whose Column is not null.
	Rows int64
}

// Lease is a leader lease (see Store.Elect) that has not expired: a client renews it while it lives.
type Lease struct {
	Name      string
	LeaderID  string
	ExpiresAt time.Time
}

// DownPlanner is implemented by stores whose rollbacks can be previewed (PostgreSQL, SQLite), so
// that pronto migrate down refuses to delete data, or to pull the schema from under live clients,
// unless forced.
type DownPlanner interface {
	// DownDataLoss reports what MigrateDown(ctx, steps) would delete, without changing anything:
	// only tables and columns that hold data are listed. Leader leases are not counted as data.
	DownDataLoss(ctx context.Context, steps int) ([]DataLoss, error)
	// LiveLeases lists the leader leases that have not expired. Every started client with
	// maintenance enabled holds or contends for one, renewing it every LeaderTTL/3, so an empty list
	// means no such client has been live for a LeaderTTL.
	LiveLeases(ctx context.Context) ([]Lease, error)
}

// ReportingMigrator is implemented by stores with a versioned schema (PostgreSQL, SQLite). Its
// calls say what they changed themselves, and its rollback is checked under the migration lock, so
// that callers running at once (the replicas of a deploy, two operators) neither claim each other's work nor
// revert migrations nobody checked. pronto migrate uses it.
type ReportingMigrator interface {
	// ApplyMigrations applies every pending migration, like Store.Migrate, and returns the ones this
	// call applied, oldest first: none when every one was applied already, by an earlier or a
	// concurrent caller.
	ApplyMigrations(ctx context.Context) ([]Migration, error)
	// RevertMigrations reverts the latest steps applied migrations, newest first, like
	// Migrator.MigrateDown, and returns the ones it reverted, newest first, as they stood before.
	//
	// When check is not nil and there is something to revert, it is called once the call holds the
	// schema's migration lock, before anything is reverted, with the migrations it is about to
	// revert: no other migration or rollback can change the schema until the call returns, so what
	// check reads of the store (DownPlanner) is what gets reverted. An error from check reverts
	// nothing and is returned as it is. check runs beside the call's open transaction: it may read
	// through the store (on PostgreSQL the pool needs a second connection for it) but must not write.
	RevertMigrations(ctx context.Context, steps int, check func(ctx context.Context, revert []Migration) error) ([]Migration, error)
}
