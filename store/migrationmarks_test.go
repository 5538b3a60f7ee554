package store

import (
	"errors"
	"testing"
	"time"
)

// TestMigrationMark: a migration after the last unmarked one must say whether older binaries may
// run on its schema, and the error of one that does not names it; older ones need not.
func TestMigrationMark(t *testing.T) {
	ok, err := MigrationMark(27, "x", "-- older binaries: compatible\nSELECT 1;", 26)
	if err != nil || !ok {
		t.Fatalf("marked compatible: %v %v", ok, err)
	}
	if ok, err := MigrationMark(26, "old", "SELECT 1;", 26); err != nil || ok {
		t.Fatalf("an unmarked migration before the marks: %v %v", ok, err)
	}
	_, err = MigrationMark(27, "x", "SELECT 1;", 26)
	want := `migration 027_x lacks a "-- older binaries: " line (compatible or incompatible)`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
}

// TestCheckApplied: unknown applied migrations marked compatible are accepted, and one not so marked
// is refused naming it, the compatible one not named incompatible.
func TestCheckApplied(t *testing.T) {
	at := time.Unix(1, 0)
	mk := func(v int, name string, ok bool) MarkedMigration {
		return MarkedMigration{Migration: Migration{Version: v, Name: name, Applied: true, AppliedAt: at}, OlderOK: ok}
	}
	known := []MarkedMigration{{Migration: Migration{Version: 1, Name: "a"}}, {Migration: Migration{Version: 2, Name: "b"}}}
	applied := []MarkedMigration{mk(1, "a", false), mk(2, "b", false), mk(3, "c", true)}
	if err := CheckApplied("here", known, applied); err != nil {
		t.Fatal(err)
	}
	status, unknown := AppliedStatus(known, applied)
	if len(status) != 2 || !status[1].Applied || status[1].AppliedAt != at || len(unknown) != 1 || unknown[0] != 3 {
		t.Fatalf("status %v, unknown %v", status, unknown)
	}
	applied = append(applied, mk(4, "d", false))
	err := CheckApplied("here", known, applied)
	want := "schema is newer than this binary: here has migration(s) 003, 004 applied, which this version of pronto does not know; " +
		"upgrade pronto, or roll them back with the newer binary's pronto migrate down " +
		"(not marked compatible with older binaries: 004_d; this binary knows migrations up to 002)"
	if !errors.Is(err, ErrSchemaTooNew) || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
	c, i := SplitNewer(NewerThan(applied, 2))
	if len(c) != 1 || c[0].Version != 3 || len(i) != 1 || i[0].Version != 4 {
		t.Fatalf("compatible %v, incompatible %v", c, i)
	}
	if err := CheckApplied("here", known, applied[:1]); !errors.Is(err, ErrSchemaNotMigrated) {
		t.Fatalf("a missing migration: %v", err)
	}
}
