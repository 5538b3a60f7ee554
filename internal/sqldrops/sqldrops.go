// Package sqldrops finds what a down migration drops: whole tables, and columns of tables it keeps.
// The PostgreSQL and SQLite stores use it to count the rows a rollback would delete before it runs,
// and their tests compare its reading of every down migration with the catalog's, so a migration
// written in a form it does not read fails a test instead of deleting data unannounced.
package sqldrops

import (
	"regexp"
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
