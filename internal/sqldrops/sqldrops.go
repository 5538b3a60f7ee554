// Package sqldrops finds what a down migration drops: whole tables, and columns of tables it keeps.
// The PostgreSQL and SQLite stores use it to count the rows a rollback would delete before it runs,
// and their tests compare its reading of every down migration with the catalog's, so a migration
// written in a form it does not read fails a test instead of deleting data unannounced.
package sqldrops

import (
	"regexp"
	"slices"
	"strings"
)

// Drop is a table (Column empty) or a column a migration drops.
type Drop struct {
	Table  string
	Column string
}

var (
	lineComment = regexp.MustCompile(`--[^\n]*`)
	dropTable   = regexp.MustCompile(`(?is)^\s*DROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?([\w."]+(?:\s*,\s*[\w."]+)*)`)
	alterTable  = regexp.MustCompile(`(?is)^\s*ALTER\s+TABLE\s+(?:IF\s+EXISTS\s+)?(?:ONLY\s+)?([\w."]+)\s+(.*)$`)
	dropColumn  = regexp.MustCompile(`(?is)\bDROP\s+(?:COLUMN\s+)?(?:IF\s+EXISTS\s+)?([\w"]+)`)
	dropNonCol  = regexp.MustCompile(`(?i)^(CONSTRAINT|INDEX|TRIGGER)$`)
)

// Parse returns the tables and columns dropped by the statements of sql, in order. Names are
// unquoted and lowercased, without a schema qualifier; a column of a table dropped by the same text
// is left out (the table's drop covers it).
func Parse(sql string) []Drop {
	sql = lineComment.ReplaceAllString(sql, "")
	var out []Drop
	tables := map[string]bool{}
	for _, stmt := range strings.Split(sql, ";") {
		if m := dropTable.FindStringSubmatch(stmt); m != nil {
			for _, name := range strings.Split(m[1], ",") {
				t := bareName(name)
				tables[t] = true
				out = append(out, Drop{Table: t})
			}
			continue
		}
		m := alterTable.FindStringSubmatch(stmt)
		if m == nil {
			continue
		}
		table := bareName(m[1])
		for _, clause := range strings.Split(m[2], ",") {
			c := dropColumn.FindStringSubmatch(clause)
			if c == nil || dropNonCol.MatchString(c[1]) {
				continue
			}
			out = append(out, Drop{Table: table, Column: bareName(c[1])})
		}
	}
	kept := out[:0]
	for _, d := range out {
		if d.Column == "" || !tables[d.Table] {
			kept = append(kept, d)
		}
	}
	return kept
}

// bareName strips quotes, a schema qualifier and spaces, and lowercases.
func bareName(s string) string {
	s = strings.TrimSpace(strings.ReplaceAll(s, `"`, ""))
	if i := strings.LastIndex(s, "."); i >= 0 {
		s = s[i+1:]
	}
	return strings.ToLower(s)
}

// Columns is a catalog reading: each table with its columns, and "" for the table itself.
type Columns map[string]map[string]bool

// Add records a table's column (and the table).
func (c Columns) Add(table, column string) {
	if c[table] == nil {
		c[table] = map[string]bool{"": true}
	}
	c[table][column] = true
}

// Removed lists what is in before but not in after: whole tables, and the columns of tables
// that remain. Tests compare it with Parse of the down migration that went between the readings.
func Removed(before, after Columns) []Drop {
	var out []Drop
	for table, cols := range before {
		if after[table] == nil {
			out = append(out, Drop{Table: table})
			continue
		}
		for c := range cols {
			if !after[table][c] {
				out = append(out, Drop{Table: table, Column: c})
			}
		}
	}
	return out
}

// Loss is a table (Column empty) or a column whose rows a rollback deletes, with the index of
// the migration that drops it.
type Loss struct {
	Migration int
	Drop
}

// Plan returns what reverting the newest steps applied migrations would delete, newest first:
// the drops of their down files (downs[i] for migration i, applied[i] whether it is applied) that
// exist in cols, less what skip names (data nobody would miss: a table, which covers its columns,
// or "table.column") and the columns of tables the same rollback drops whole (counted with their
// table).
func Plan(downs []string, applied []bool, steps int, cols Columns, skip ...string) []Loss {
	var plan []Loss
	dropped := map[string]bool{}
	for i := len(downs) - 1; i >= 0 && steps > 0; i-- {
		if !applied[i] {
			continue
		}
		steps--
		for _, d := range Parse(downs[i]) {
			if d.Column == "" {
				dropped[d.Table] = true
			}
			if !slices.Contains(skip, d.Table) && !slices.Contains(skip, d.Table+"."+d.Column) && cols[d.Table][d.Column] {
				plan = append(plan, Loss{Migration: i, Drop: d})
			}
		}
	}
	out := plan[:0]
	for _, l := range plan {
		if l.Column == "" || !dropped[l.Table] {
			out = append(out, l)
		}
	}
	return out
}
