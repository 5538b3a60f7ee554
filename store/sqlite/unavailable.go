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

// Refused reports whether err is SQLite's word that the request's own data is at fault (a
// constraint, a value too big or of the wrong type, a parameter out of range), so trying it again
// can only fail again (store.RefusalClassifier). Any other SQLite error, such as a lock or an I/O
// error, may pass if tried again; an error that is not SQLite's cannot be told apart and counts as
// refused, as before this classifier.
func (s *Store) Refused(err error) bool {
	code := sqliteCode(err)
	if code == 0 {
		return true
	}
	switch code & 0xff {
	case sqlite3.SQLITE_CONSTRAINT, sqlite3.SQLITE_TOOBIG, sqlite3.SQLITE_MISMATCH, sqlite3.SQLITE_RANGE:
		return true
	}
	return false
}
