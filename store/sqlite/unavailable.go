package sqlite

import (
	"strings"

	sqlite3 "modernc.org/sqlite/lib"
)

// Unavailable reports whether err means the database file cannot serve now: busy or locked beyond
// the busy timeout, an I/O error, a file that cannot be opened or a full disk, or the store closed
// (store.UnavailableClassifier).
func (s *Store) Unavailable(err error) bool {
	switch sqliteCode(err) & 0xff { // the primary result code of an extended one
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN,
		sqlite3.SQLITE_FULL:
		return true
	}
	// database/sql's error for a closed *sql.DB is not exported.
	return strings.Contains(err.Error(), "sql: database is closed")
}
