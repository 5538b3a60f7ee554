package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pronto-jobs/pronto/store"
)

var _ store.WriteProbe = (*Store)(nil)

// ProbeWritable reports whether the database can be written now (store.WriteProbe), without a write
// or a lock: it asks the operating system whether this process may write the file, its -wal and -shm
// files and their directory (a read-only mount, a file or directory made read-only), and SQLite
// whether a reader connection opened the file read-only (sqlite3_db_readonly). The writer
// connection is not asked: it is the one connection every write waits for.
//
// A file made read-only while the store runs may still be written through the connections opened
// before; it is reported read-only all the same, since a connection opened again (after an error,
// or at the next start) can no longer write it, and Open refuses a directory it cannot write.
func (s *Store) ProbeWritable(ctx context.Context) error {
	dir := filepath.Dir(s.path)
	for _, p := range []struct{ path, what string }{
		{s.path, "the database file"}, {s.path + "-wal", "its -wal file"}, {s.path + "-shm", "its -shm file"},
		{dir, "its directory"},
	} {
		err := canWrite(p.path)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			// A missing -wal or -shm is made when needed; a database file removed under the store is
			// not a matter of writes.
			continue
		}
		if readOnlyFS(err) {
			return store.ReadOnlyError("sqlite store: %s %q is on a read-only file system", p.what, p.path)
		}
		if errors.Is(err, os.ErrPermission) {
			return store.ReadOnlyError("sqlite store: this process may not write %s %q (%v)", p.what, p.path, err)
		}
		return fmt.Errorf("sqlite store: probe for writes: %s %q: %w", p.what, p.path, err)
	}
	conn, err := s.r.Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlite store: probe for writes: %w", err)
	}
	defer conn.Close()
	var readOnly bool
	err = conn.Raw(func(dc any) error {
		if g, ok := dc.(*gatedConn); ok {
			dc = g.base
		}
		ro, ok := dc.(interface {
			IsReadOnly(schema string) (bool, error)
		})
		if !ok {
			return nil // a driver that cannot tell: the file checks above stand
		}
		var err error
		readOnly, err = ro.IsReadOnly("main")
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite store: probe for writes: %w", err)
	}
	if readOnly {
		return store.ReadOnlyError("sqlite store: the database %q was opened read-only (the file could not be opened for writing)", s.path)
	}
	return nil
}
