package store

import (
	"fmt"
	"strings"
	"time"
)

// OlderBinariesLine is how a SQL store's migration says in its up file whether binaries that do not
// know it may keep running on the schema it produces: a line "-- older binaries: compatible" (it
// only adds what older code never touches, or changes nothing older code relies on) or "-- older
// binaries: incompatible, <why>" (older code would fail or corrupt data on it). Binaries record the
// mark beside the migration in the schema's migrations table, where older binaries read it. The
// PostgreSQL and SQLite stores share it, so that one rule decides on both.
const OlderBinariesLine = "-- older binaries:"

// ParseOlderBinaries returns the mark of a migration's up script (OlderBinariesLine), and whether it
// has one.
func ParseOlderBinaries(up string) (compatible, marked bool) {
	for line := range strings.Lines(up) {
		comment, ok := strings.CutPrefix(strings.TrimSpace(line), "--")
		if !ok {
			continue
		}
		rest, ok := strings.CutPrefix(strings.TrimSpace(comment), strings.TrimPrefix(OlderBinariesLine, "-- "))
		if !ok {
			continue
		}
		word, _, _ := strings.Cut(strings.TrimSpace(rest), ",")
		switch strings.TrimSpace(word) {
		case "compatible":
			return true, true
		case "incompatible":
			return false, true
		}
	}
	return false, false
}

// MigrationMark returns the mark of the embedded migration version_name whose up script is up:
// whether binaries that do not know it may run on its schema. Every migration after lastUnmarked
// (the newest released before the marks, whose marks no binary consults) must carry one: a missing
// one is an error naming the migration, a defect of the build.
func MigrationMark(version int, name, up string, lastUnmarked int) (olderOK bool, err error) {
	olderOK, marked := ParseOlderBinaries(up)
	if !marked && version > lastUnmarked {
		return false, fmt.Errorf("migration %03d_%s lacks a %q line (compatible or incompatible)",
			version, name, OlderBinariesLine+" ")
	}
	return olderOK, nil
}

// MarkedMigration is a migration with its older-binaries mark: one a binary embeds, or a row of a
// schema's migrations table.
type MarkedMigration struct {
	Migration
	// OlderOK says that binaries which do not know the migration may keep running on its schema.
	// False when marked incompatible, or recorded by a binary that predates the marks.
	OlderOK bool
}

// IncompatibleOf lists the migrations of known (a binary's own, oldest first) after lastUnmarked
// that are marked incompatible with older binaries, as IncompatibleMigrations reports them.
func IncompatibleOf(known []MarkedMigration, lastUnmarked int) []Migration {
	var out []Migration
	for _, m := range known {
		if m.Version > lastUnmarked && !m.OlderOK {
			out = append(out, Migration{Version: m.Version, Name: m.Name})
		}
	}
	return out
}

// AppliedStatus pairs the migrations a binary knows (known, oldest first) with the rows of a
// schema's migrations table (applied, oldest first): every known one with whether and when it was
// applied, as MigrationStatus lists them, and the versions of the applied ones the binary does not
// know, in order.
func AppliedStatus(known, applied []MarkedMigration) (status []Migration, unknown []int) {
	at := make(map[int]time.Time, len(applied))
	for _, a := range applied {
		at[a.Version] = a.AppliedAt
	}
	status = make([]Migration, len(known))
	for i, k := range known {
		t, ok := at[k.Version]
		status[i] = Migration{Version: k.Version, Name: k.Name, Applied: ok, AppliedAt: t}
		delete(at, k.Version)
	}
	for _, a := range applied {
		if _, ok := at[a.Version]; ok {
			unknown = append(unknown, a.Version)
		}
	}
	return status, unknown
}

// NewerThan returns the migrations of applied (oldest first) after last, the newest a binary knows:
// those a newer pronto applied.
func NewerThan(applied []MarkedMigration, last int) []MarkedMigration {
	for i, a := range applied {
		if a.Version > last {
			return applied[i:]
		}
	}
	return nil
}

// SplitNewer splits migrations a newer pronto applied by their mark, as NewerMigrations reports
// them.
func SplitNewer(newer []MarkedMigration) (compatible, incompatible []Migration) {
	for _, n := range newer {
		if n.OlderOK {
			compatible = append(compatible, n.Migration)
		} else {
			incompatible = append(incompatible, n.Migration)
		}
	}
	return compatible, incompatible
}

// CheckApplied is CheckSchema's verdict on the schema at where whose migrations table holds applied
// (oldest first), for a binary that knows the migrations known (oldest first): nil when every known
// one is applied and every unknown one was marked compatible with older binaries, else a
// *SchemaError (see CheckNewer).
func CheckApplied(where string, known, applied []MarkedMigration) error {
	status, unknown := AppliedStatus(known, applied)
	if len(unknown) == 0 {
		return CheckMigrations(where, status, nil)
	}
	return CheckNewer(where, status, NewerThan(applied, known[len(known)-1].Version))
}

// CheckNewer is CheckSchema's verdict on a schema whose known migrations are ms (with whether each
// is applied) and which also has the newer migrations newer applied: nil when ms are all applied
// and every newer one lets older binaries run, else a *SchemaError naming every newer one (they
// all must be reverted, newest first, to reach the incompatible ones), wrapped to say which are
// incompatible.
func CheckNewer(where string, ms []Migration, newer []MarkedMigration) error {
	var unknown []int
	var refused []string
	for _, n := range newer {
		unknown = append(unknown, n.Version)
		if !n.OlderOK {
			refused = append(refused, fmt.Sprintf("%03d_%s", n.Version, n.Name))
		}
	}
	if len(refused) == 0 {
		return CheckMigrations(where, ms, nil)
	}
	err := CheckMigrations(where, ms, unknown)
	return fmt.Errorf("%w (not marked compatible with older binaries: %s; this binary knows migrations up to %03d)",
		err, strings.Join(refused, ", "), ms[len(ms)-1].Version)
}
