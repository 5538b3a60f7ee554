package sqlite

import (
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/pronto-jobs/pronto/store"
)

// Condition names SQLite's busy and locked results (past the busy timeout another connection or
// process still holds the file's lock) as store.ConditionBusy, so that operators are told the
// database is busy rather than that the store "cannot serve now" (store.ConditionClassifier). Any
// other error is left to store.ConditionOf's generic signs.
func (s *Store) Condition(err error) store.Condition {
	switch sqliteCode(err) & 0xff { // the primary result code of an extended one
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return store.ConditionBusy
	}
	return store.ConditionNone
}
