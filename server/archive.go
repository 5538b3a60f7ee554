package server

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/pronto-jobs/pronto"
)

// FileArchive is a pronto.DeadLetterArchive (ojs-dead-letter.md 8.2, pruning_policy archive) that
// appends the jobs it is given to JSON Lines files in a folder, one file per UTC day
// (dead-letter-2026-11-30.jsonl), one line per job:
//
//	{"archived_at":"2026-11-30T10:00:00.000Z","job":{...the job as GET /ojs/v1/jobs/{id} shows it...}}
//
// Each batch is one write followed by fsync, so a batch it accepted survives a crash of the
// machine. A line cut short by a crash mid-write is left as it is and ended before the next batch,
// so that every later line parses; readers skip a line that does not. A job may appear twice (see
// pronto.DeadLetterArchive): its id and completed_at identify it. Files are created readable by
// their owner only; rotating or shipping old days elsewhere is the operator's (the files are never
// written again once their day is over).
type FileArchive struct {
	dir string
	now func() time.Time
	mu  sync.Mutex // one writer at a time per process, so batches never interleave
}

var _ pronto.DeadLetterArchive = (*FileArchive)(nil)

// NewFileArchive returns an archive writing in dir, which it creates if missing; it fails when dir
// cannot be written, so that a misconfigured archive is found at start-up rather than at the first
// pruning pass.
func NewFileArchive(dir string) (*FileArchive, error) {
	if dir == "" {
		return nil, fmt.Errorf("dead letter archive: no folder given")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("dead letter archive: %w", err)
	}
	probe, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return nil, fmt.Errorf("dead letter archive: folder %s is not writable: %w", dir, err)
	}
	name := probe.Name()
	_ = probe.Close()
	_ = os.Remove(name)
	return &FileArchive{dir: dir, now: time.Now}, nil
}

// Dir returns the folder the archive writes in.
func (a *FileArchive) Dir() string { return a.dir }

// ArchiveDeadLetter appends jobs to today's file and syncs it to disk.
func (a *FileArchive) ArchiveDeadLetter(ctx context.Context, jobs []*pronto.JobRow) error {
	if len(jobs) == 0 {
		return ctx.Err()
	}
	at := a.now().UTC()
	var b []byte
	for _, j := range jobs {
		b = appendTimeField(append(b, '{'), "archived_at", at)
		b = append(appendJob(appendKey(b, "job"), j), '}', '\n')
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.appendSynced(filepath.Join(a.dir, "dead-letter-"+at.Format(time.DateOnly)+".jsonl"), b)
}

// appendSynced appends b to the file at path, ending a line a crash cut short first, and syncs the
// file (and the folder, when the file is new, so that its name survives a crash too).
func (a *FileArchive) appendSynced(path string, b []byte) (err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("dead letter archive: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("dead letter archive: %w", cerr)
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("dead letter archive: %w", err)
	}
	if size := st.Size(); size > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, size-1); err != nil && err != io.EOF {
			return fmt.Errorf("dead letter archive: %w", err)
		}
		if last[0] != '\n' {
			b = append([]byte{'\n'}, b...)
		}
	}
	if _, err := f.Write(b); err != nil {
		return fmt.Errorf("dead letter archive: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("dead letter archive: sync %s: %w", path, err)
	}
	if st.Size() == 0 {
		return syncDir(a.dir)
	}
	return nil
}

// syncDir makes a new file's name in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("dead letter archive: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("dead letter archive: sync folder %s: %w", dir, err)
	}
	return nil
}
