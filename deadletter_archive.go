package pronto

import (
	"context"
	"fmt"

	"github.com/pronto-jobs/pronto/store"
)

// PruningPolicy says what happens to the dead letter jobs that retention prunes
// (ojs-dead-letter.md 8.2).
type PruningPolicy string

const (
	// PruneDelete deletes them for good (the default).
	PruneDelete PruningPolicy = "delete"
	// PruneArchive hands them to Config.DeadLetterArchive first, and deletes them only once it
	// has kept them: for queues whose failures an audit must be able to read after the dead
	// letter queue let them go.
	PruneArchive PruningPolicy = "archive"
)

// check reports whether p is a known policy ("" is PruneDelete) that this client can apply.
func (p PruningPolicy) check(hasArchive bool) error {
	switch p {
	case "", PruneDelete:
		return nil
	case PruneArchive:
		if !hasArchive {
			return invalidf("pruning policy %q needs a dead letter archive (Config.DeadLetterArchive)", p)
		}
		return nil
	}
	return invalidf("pruning policy %q: must be %q or %q", p, PruneDelete, PruneArchive)
}

// DeadLetterArchive keeps dead letter jobs that pruning is about to delete, for queues whose
// pruning policy is PruneArchive. The maintenance leader reads a batch of the jobs retention
// selects (at most 1000), calls ArchiveDeadLetter with them, and deletes them only if it returned
// nil, and then only those still discarded as read: a job retried meanwhile stays, and is archived
// again if it is discarded again and pruned.
//
// An error deletes nothing; the batch is offered again at the next cleanup pass (every 30 s), so an
// archive that is down delays pruning and loses nothing. A job can therefore reach the archive
// twice (archived, then the delete failed, or leadership moved mid-pass): key the archive by job id
// and CompletedAt. ArchiveDeadLetter must keep the jobs durably before it returns; it runs on the
// leader's maintenance goroutine, so it should return within a few seconds. server.FileArchive
// keeps them in JSON Lines files.
type DeadLetterArchive interface {
	ArchiveDeadLetter(ctx context.Context, jobs []*JobRow) error
}

// archiveDeadLetter gives the maintenance leader the configured archive, or nil.
func (c *Client) archiveDeadLetter() func(ctx context.Context, jobs []*store.Job) error {
	a := c.cfg.DeadLetterArchive
	if a == nil {
		return nil
	}
	return func(ctx context.Context, jobs []*store.Job) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("pronto: the dead letter archive panicked: %v", r)
			}
		}()
		return a.ArchiveDeadLetter(ctx, jobs)
	}
}
