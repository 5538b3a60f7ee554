package postgres

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pronto-jobs/pronto/internal/lostclaim"
	"github.com/pronto-jobs/pronto/store"
)

// A claim whose reply is lost (the connection broke, or the caller's context ended, after its
// statements were sent) may still commit: its jobs would then stay active, run by no one, until
// their leases ended, and the rescue would count an attempt that never ran, discarding a job that
// had one attempt left. So every claim writes its tag (16 random hex digits) at the front of each
// claim token it gives (taggedClaimToken), and a claim that fails without knowing whether it
// committed hands its tag to the store's recovery (internal/lostclaim), which returns the jobs
// carrying it to available with the attempt refunded. The claim's backend may still be at work
// (waiting for a lock, say) when the client gives up, so the recovery looks again until that
// backend has finished, and ends at the claim's lease at the latest, when the rescue takes over.

const (
	// recoverWatch is how long the recovery of a lost claim goes on at least (internal/lostclaim
	// sets its pace), whatever the backend's state says: behind a pooler such as PgBouncer the
	// process id pgx knows is not the server's.
	recoverWatch = 2 * time.Second
	// recoverLease stands for a claim's lease when it has none.
	recoverLease = time.Minute
)

const (
	// sqlBackendDone tells whether backend $1 is gone or idle: its transaction, if any, has
	// committed or rolled back, and a commit is visible to every later statement.
	sqlBackendDone = `SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity
		WHERE pid = $1::integer AND state IS DISTINCT FROM 'idle')`

	// sqlClaimedUnder lists the jobs of queue $1 active under a claim token tagged $2. Active jobs
	// hold a lease: the condition on it lets the scan read the leases' partial index, the active
	// jobs only, not the table.
	sqlClaimedUnder = `SELECT id::text, attempt, claim_token::text FROM {schema}.jobs
	WHERE lease_expires_at IS NOT NULL AND state = 'active' AND queue = $1
		AND left(replace(claim_token::text, '-', ''), 16) = $2`
)

// newClaimTag returns a claim's tag: 64 random bits as 16 hex digits.
func newClaimTag() string {
	return hex.EncodeToString(binary.BigEndian.AppendUint64(nil, rand.Uint64()))
}

// outcomeUnknown reports whether a claim that failed with err may have committed: its error is
// neither the server's (which rolls the claim's implicit transaction back) nor one pgx raised
// before sending anything.
func outcomeUnknown(err error) bool {
	var pgErr *pgconn.PgError
	return err != nil && !errors.As(err, &pgErr) && !pgconn.SafeToRetry(err)
}

// sendClaim sends the claim batch b, tagged tag (its plan statement sets it), on a connection of
// the pool, reads its results with read (nil: the batch's own callbacks read them), and returns the
// first error. When the claim failed without knowing whether it committed, its jobs are recovered
// (settleLostClaim).
func (s *Store) sendClaim(ctx context.Context, p *store.ClaimParams, tag string, b *pgx.Batch,
	read func(pgx.BatchResults) error) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	pid := c.Conn().PgConn().PID()
	br := c.SendBatch(ctx, b)
	if read != nil {
		err = read(br)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	c.Release()
	if outcomeUnknown(err) {
		lease := p.LeaseDuration
		if lease <= 0 {
			lease = recoverLease
		}
		now := time.Now()
		s.lost.Add(lostClaim{queue: p.Queue, tag: tag, pid: pid, at: now, until: now.Add(lease)})
	}
	return err
}

// lostClaim is a claim whose outcome is unknown.
type lostClaim struct {
	queue, tag string
	// pid is the process id of the backend that ran the claim.
	pid uint32
	// at is when the claim failed; until is when its lease ends.
	at, until time.Time
}

// newClaimRecovery returns the store's recovery of lost claims.
func newClaimRecovery(s *Store) *lostclaim.Recovery[lostClaim] {
	claimedUnder := s.expand.Replace(sqlClaimedUnder)
	return lostclaim.New(func(ctx context.Context, c lostClaim) bool {
		return s.settleLostClaim(ctx, c, claimedUnder)
	})
}

// settleLostClaim returns the jobs of c found active under its tag to available, refunding their
// attempts, and reports whether c is done with: its backend had finished before the look, and
// recoverWatch has passed since the loss; or its lease has ended (the rescue has its jobs then).
func (s *Store) settleLostClaim(ctx context.Context, c lostClaim, claimedUnder string) bool {
	now := time.Now()
	if !now.Before(c.until) {
		return true
	}
	ctx, cancel := context.WithDeadline(ctx, c.until)
	defer cancel()
	var finished bool
	if err := s.pool.QueryRow(ctx, sqlBackendDone, int64(c.pid)).Scan(&finished); err != nil {
		return false
	}
	rows, err := s.pool.Query(ctx, claimedUnder, c.queue, c.tag)
	if err != nil {
		return false
	}
	cs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Completion, error) {
		comp := store.Completion{State: store.StateAvailable, RefundAttempt: true}
		return comp, row.Scan(&comp.ID, &comp.Attempt, &comp.Token)
	})
	if err != nil {
		return false
	}
	if len(cs) > 0 {
		if _, err := s.Finish(ctx, cs); err != nil {
			return false
		}
		s.log.Warn("pronto: a claim's reply was lost after it took jobs: returned them, attempts refunded",
			"schema", s.schema, "queue", c.queue, "jobs", len(cs))
	}
	return finished && now.Sub(c.at) >= recoverWatch
}
