package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pronto-jobs/pronto/internal/cancelset"
	"github.com/pronto-jobs/pronto/internal/handoffbuf"
	"github.com/pronto-jobs/pronto/internal/jsonscan"
	"github.com/pronto-jobs/pronto/store"
)

// Hand-off: pickup without a claim round trip.
//
// Without it, a job inserted into an idle queue is picked up in three steps: the insert commits
// and notifies the queue, the waiting producer's listener hears it, and the producer claims the job
// in a round trip of its own. With it, a producer's claim that leaves worker slots free also
// advertises the producer (a row of the unlogged table waiters: queue, kinds, worker, lease, free
// slots, and this store's hand-off channel), and a single insert writes a job due now already
// claimed by the producer of its queue waiting longest (sqlInsertHanded), when that producer's own
// claim would take the job first, and notifies the job itself on the producer's channel. The
// listener files the job with its waiter and wakes the producer, whose next Claim returns it
// without a round trip. When nobody waits, the insert is announced as before, so pickup never
// waits longer than without the hand-off.
//
// The rules are the plain claim's: kinds, paused queues, and claim order (no claimable job at the
// job's priority or above); queues with rate-limited or tenant jobs are left to their own claims.
// The job is active under a lease and a claim token like any claimed job. Each hand-off spends one
// of the advertised free slots; the producer's next claim of its own writes the count again, so
// the count never exceeds the producer's free slots. The lease is the producer's plus
// handoffSlack: the client reckons a lease from the start of the Claim call that returns the job,
// after the lease began in the database.
//
// What can go wrong, and what happens then:
//   - the producer is busy or stopped: a handed job not taken by a Claim within serveWithin is
//     returned to available (the attempt refunded, the queue announced) and the advertisement
//     withdrawn;
//   - the listener loses its connection: its notifications meanwhile are lost, so the store
//     withdraws its advertisements at once and advertises again only once listening. A job handed
//     in between goes back unstarted, its attempt refunded (giveBackLost): its claim token starts
//     with its waiter's id, so the store finds the jobs handed to its waiters that it never
//     received. The same happens at Close, and when a large handed job cannot be read;
//   - the process dies: an insert hands nothing to a producer whose listener's backend is gone
//     (the advertisement names it; a killed process's connections end with it), and the jobs
//     handed to it before are rescued when their leases end. A process that hangs (stopped, its
//     connections open) is handed jobs until its advertisements lapse, adTTL after its last
//     claim; an idle producer claims, and so advertises again, at every poll. Only the process
//     knows which handed jobs it received, so these are rescued as before, the attempt counted;
//   - a give-back fails (the database unreachable, the statement cancelled): it is tried again
//     after a pause, doubled up to retryMax, until it goes through or the store closes
//     (retryGiveBack), the listener up or not.
const (
	// quietFor is how long single inserts into a queue skip the hand-off after one found nobody
	// waiting: the hand-off's insert costs about 0.2 ms more than a plain one (the producer checks),
	// which a busy queue, whose producers have no free slots, would pay on every insert.
	quietFor     = 50 * time.Millisecond
	adTTL        = 3 * time.Second
	handoffSlack = 250 * time.Millisecond
	serveWithin  = 100 * time.Millisecond
	// releaseTimeout bounds returning unserved jobs and withdrawing advertisements.
	releaseTimeout = 5 * time.Second
	// retryFirst and retryMax are the first and the longest pause before a failed give-back is
	// tried again (retryGiveBack): well within a hand-off's lease, so the job goes back unstarted
	// rather than to the rescue, which counts the attempt.
	retryFirst = 100 * time.Millisecond
	retryMax   = 5 * time.Second
	// settledMargin is how long past a hand-off's lease the store remembers that it received (or
	// gave back) the job: the lease is reckoned by the database's clock, which may run ahead.
	settledMargin = time.Minute
)

// handoff is a store's side of the hand-off: its channel and its producers' waiters.
type handoff struct {
	s       *Store
	channel string
	// listening is set while the notifier listens on channel: advertisements are written only then.
	listening atomic.Bool
	// gen counts the times the listener stopped listening and the store closed: a claim that saw
	// another at its start (waiterGen) may have advertised after its withdrawal (afterClaim).
	gen atomic.Uint64
	// serveWithin is the package's serveWithin, per store so a test can lengthen it.
	serveWithin time.Duration

	// quiet holds, per queue and kind, until when (UnixNano) single inserts skip the hand-off: the
	// last one found no producer waiting (see tryHandoff).
	quiet sync.Map
	// quietFor is the package's quietFor, per store so a test can change it.
	quietFor time.Duration

	// cancels are the active jobs cancelled lately (see heardCancel).
	cancels cancelset.Set

	// lose, set by tests only, is asked about every hand-off notification before it is handled; true
	// drops it, as a listener whose connection fails with the notification in flight loses it.
	lose atomic.Pointer[func(payload string) bool]
	// failFetch, set by tests only, makes every read of a large handed job fail.
	failFetch atomic.Bool
	// adHook, set by tests only, runs in a producer's claim that advertises: with false as the claim
	// statement is made (its listener's pid read), with true once it went through, before afterClaim.
	adHook atomic.Pointer[func(written bool)]

	// unserved is sqlHandedUnserved in the store's schema.
	unserved string
	// unsure is set when the listener stopped listening and the advertisements or the jobs handed
	// meanwhile could not be dealt with (the database unreachable): the listener's next connection
	// does it before it advertises again.
	unsure atomic.Bool

	mu      sync.Mutex
	waiters map[string]*waiter // by queue, worker, lease and kinds
	byID    map[string]*waiter
	closing bool
	// settled holds the claim tokens of the handed jobs this process received or gave back, until
	// (UnixNano) their hand-off leases could have ended: giveBackLost and received each act on a
	// handed job only if the other did not, so a job given back is never also run here.
	settled     map[string]int64
	settledNext int // prune settled when it grows to this many
	// failed are the jobs giveBackLost settled whose return failed (the database unreachable, the
	// statement cancelled), and those whose return expire or deliver tried: settled, no one else
	// gives them back, so the next giveBackLost tries again. A second return of a job returned after
	// all is fenced by its claim token.
	failed []*store.Job
	// retrying is set while retryGiveBack's loop runs.
	retrying bool
	// closed is closed by close: a retry loop ends.
	closed chan struct{}
}

// waiter is one producer's advertisement and the jobs handed to it, not yet taken.
type waiter struct {
	h      *handoff
	key    string
	id     string
	params store.ClaimParams // Limit unset; Kinds sorted

	buf handoffbuf.Buffer
	// used is when a claim last went through this waiter (UnixNano).
	used atomic.Int64
	// notified is set by a notification of the queue since the producer's last claim of its own.
	notified atomic.Bool
	// adFree is the free slots the producer's last claim of its own advertised, and handed the jobs
	// handed to it since: once half the slots are spent, its next Claim also claims of its own,
	// which advertises its free slots afresh. A producer served by hand-offs alone makes no claim
	// of its own, so its count would only fall, and once at zero each insert would be announced
	// and claimed in a round trip of its own.
	adFree atomic.Int64
	handed atomic.Int64
}

// newHandoff also makes the hand-off's insert tag the claim tokens it writes with the waiter's id
// (sqlInsertHandedTagged), which giveBackLost relies on.
func newHandoff(s *Store) *handoff {
	s.q.insertHanded = s.expand.Replace(sqlInsertHandedTagged)
	return &handoff{s: s, channel: "pronto_h_" + randomHex(12), serveWithin: serveWithin, quietFor: quietFor,
		unserved: s.expand.Replace(sqlHandedUnserved), closed: make(chan struct{}),
		waiters: make(map[string]*waiter), byID: make(map[string]*waiter), settled: make(map[string]int64)}
}

// tokenWaiter returns the id of the waiter a handed job's claim token names (its first 16 hex
// digits, see sqlInsertHandedTagged).
func tokenWaiter(token string) string {
	if len(token) != 36 {
		return ""
	}
	return token[:8] + token[9:13] + token[14:18]
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// waiterFor returns the waiter of a producer's claim, or nil when the store does not hand off now
// (off, closing, or its listener not listening).
func (h *handoff) waiterFor(p *store.ClaimParams) *waiter {
	w, _ := h.waiterGen(p)
	return w
}

// waiterGen is waiterFor that also returns the generation (handoff.gen) the claim starts in, which
// the claim hands to afterClaim. It is the claim's own: claims of one producer overlap (a
// notification's and a poll's), and a waiter's latest claim may have begun after the listener
// listened again while an earlier one, begun before it stopped, advertised after the withdrawal.
func (h *handoff) waiterGen(p *store.ClaimParams) (*waiter, uint64) {
	if h == nil {
		return nil, 0
	}
	// Read before listening: a generation read while listening is the one the claim starts in.
	gen := h.gen.Load()
	if !h.listening.Load() {
		return nil, 0
	}
	kinds := p.Kinds
	if len(kinds) > 1 {
		kinds = slices.Compact(slices.Sorted(slices.Values(kinds)))
	}
	key := p.Queue + "\x00" + p.WorkerID + "\x00" + strconv.FormatInt(int64(p.LeaseDuration), 10) + "\x00" + strings.Join(kinds, "\x00")
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return nil, 0
	}
	if w := h.waiters[key]; w != nil {
		w.used.Store(now.UnixNano())
		return w, gen
	}
	// Producers are few and long-lived: forget those unused for a while when a new one comes.
	for k, w := range h.waiters {
		if now.Sub(time.Unix(0, w.used.Load())) > 2*adTTL && w.empty() {
			delete(h.waiters, k)
			delete(h.byID, w.id)
		}
	}
	w := &waiter{h: h, key: key, id: randomHex(8),
		params: store.ClaimParams{Queue: p.Queue, Kinds: kinds, WorkerID: p.WorkerID, LeaseDuration: p.LeaseDuration}}
	w.used.Store(now.UnixNano())
	h.waiters[key] = w
	h.byID[w.id] = w
	return w, gen
}

// claimArgs returns the claim statement advertising w and its arguments, for a claim of limit
// jobs.
func (w *waiter) claimArgs(q *queries, limit int) (string, []any) {
	p := &w.params
	lease := (p.LeaseDuration + handoffSlack).Microseconds()
	pid := int32(w.h.s.ListenerPID())
	if hook := w.h.adHook.Load(); hook != nil {
		(*hook)(false)
	}
	if len(p.Kinds) == 0 {
		return q.claimAd, []any{p.Queue, limit, p.LeaseDuration.Microseconds(), p.WorkerID,
			w.id, w.h.channel, nil, lease, adTTL.Microseconds(), pid}
	}
	return q.claimKindsAd, []any{p.Queue, limit, p.LeaseDuration.Microseconds(), p.WorkerID,
		p.Kinds, w.id, w.h.channel, lease, adTTL.Microseconds(), pid}
}

func (w *waiter) empty() bool { return w.buf.Len(nil) == 0 }

// advertised records that the producer's claim of its own advertised free slots (0: none).
func (w *waiter) advertised(free int) {
	w.adFree.Store(int64(free))
	w.handed.Store(0)
	if hook := w.h.adHook.Load(); hook != nil {
		(*hook)(true)
	}
}

// adLow reports whether half or more of the advertised free slots have been handed jobs.
func (w *waiter) adLow() bool {
	free := w.adFree.Load()
	return free > 0 && 2*w.handed.Load() >= free
}

// take returns up to limit handed jobs kept less than serveWithin; older ones are left to expire.
func (w *waiter) take(limit int) []*store.Job {
	return w.buf.Take(limit, w.h.serveWithin, time.Now(), nil)
}

// keep files a handed job, wakes the producer (its next Claim returns the job) and, should the
// producer not take it within serveWithin, returns it.
// A job cancelled before it got here is dropped: the cancellation wrote its state already.
func (w *waiter) keep(j *store.Job) {
	now := time.Now()
	if w.buf.Add(j, now) {
		time.AfterFunc(w.h.serveWithin, w.expire)
	}
	if w.h.cancels.Has(j.ID, j.ClaimToken, now) && w.buf.Remove(j.ID, j.ClaimToken) {
		return
	}
	w.handed.Add(1)
	w.h.s.notifier.hub.Publish(store.Notification{Kind: store.NotifyInsert, Queue: j.Queue})
}

// heardCancel drops the run of job id under claim token from the waiters' buffers: cancelled while
// handed and not yet taken, it must not start. The cancellation is also remembered for a handed job
// still on its way (read by fetch, say), which keep then drops. A run taken already is the client's
// to stop.
func (h *handoff) heardCancel(id, token string) {
	h.cancels.Add(id, token, time.Now())
	h.mu.Lock()
	ws := make([]*waiter, 0, len(h.waiters))
	for _, w := range h.waiters {
		ws = append(ws, w)
	}
	h.mu.Unlock()
	for _, w := range ws {
		if w.buf.Remove(id, token) {
			return
		}
	}
}

// expire returns the handed jobs the producer did not take within serveWithin and withdraws the
// advertisement: the producer is busy or gone, and its next claim that leaves slots free
// advertises again. While handed jobs remain it runs again when the oldest of them goes stale.
func (w *waiter) expire() {
	stale, next := w.buf.Expire(w.h.serveWithin, time.Now())
	if !next.IsZero() {
		time.AfterFunc(time.Until(next), w.expire)
	}
	if len(stale) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	_ = w.h.withdraw(ctx, []string{w.id})
	if w.h.s.release(ctx, stale) != nil {
		w.h.retryGiveBack(stale)
	}
}

// withdraw deletes the advertisements ids. Once it returns nil no job is handed to them any more:
// an insert handing one holds its advertisement's row until it commits.
func (h *handoff) withdraw(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := h.s.pool.Exec(ctx, h.s.q.withdrawWaiters, ids); err != nil {
		h.s.log.Warn("pronto: hand-off: withdrawing advertisements", "schema", h.s.schema, "error", err)
		return err
	}
	return nil
}

// settle records that this process acts on the handed job under claim token (receives it or gives
// it back) until until, and reports false when it did so already.
func (h *handoff) settle(token string, until time.Time) bool {
	now := time.Now().UnixNano()
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.settled[token]; ok {
		return false
	}
	if len(h.settled) >= h.settledNext {
		for k, t := range h.settled {
			if t < now {
				delete(h.settled, k)
			}
		}
		h.settledNext = max(2*len(h.settled), 1024)
	}
	h.settled[token] = until.UnixNano()
	return true
}

// unsettle forgets token: the job was not received after all (its read failed).
func (h *handoff) unsettle(token string) {
	h.mu.Lock()
	delete(h.settled, token)
	h.mu.Unlock()
}

// settleUntil is how long a job handed to waiter id is remembered as settled.
func (h *handoff) settleUntil(id string) time.Time {
	h.mu.Lock()
	w := h.byID[id]
	h.mu.Unlock()
	lease := time.Duration(0)
	if w != nil {
		lease = w.params.LeaseDuration + handoffSlack
	}
	return time.Now().Add(lease + settledMargin)
}

// giveBackLost returns to available, the attempt refunded, the jobs handed to this store's waiters
// that it never received: their notifications were lost with the listener's connection, came
// after Close, or named a job that could not be read. They are the active jobs whose claim tokens
// carry a waiter's id, still under the hand-off's lease (a heartbeat of a job the producer runs
// moves it), that this process did not settle. A job handed meanwhile may be given back with
// them; its notification, should it come, is then dropped. The jobs whose return fails are tried
// again by the next call, and the error returned, so that the caller has it tried again.
func (h *handoff) giveBackLost(ctx context.Context) error {
	h.mu.Lock()
	lost := h.failed
	h.failed = nil
	ids := make([]string, 0, len(h.byID))
	leases := make([]int64, 0, len(h.byID))
	for id, w := range h.byID {
		ids = append(ids, id)
		leases = append(leases, (w.params.LeaseDuration + handoffSlack).Microseconds())
	}
	h.mu.Unlock()
	var err error
	if len(ids) > 0 {
		lost, err = h.findLost(ctx, ids, leases, lost)
	}
	if err != nil {
		h.s.log.Warn("pronto: hand-off: finding jobs handed and not received", "schema", h.s.schema, "error", err)
	}
	if len(lost) > 0 {
		h.s.log.Info("pronto: hand-off: returning jobs handed and not received", "schema", h.s.schema, "jobs", len(lost))
	}
	if rerr := h.s.release(ctx, lost); rerr != nil {
		// Settled, so only this store gives them back: the next giveBackLost tries again.
		h.mu.Lock()
		h.failed = append(h.failed, lost...)
		h.mu.Unlock()
		err = errors.Join(err, rerr)
	}
	return err
}

// findLost appends to lost the jobs handed to the waiters ids (their hand-off leases leases) that
// this store has not settled, settling them. On an error it returns those it settled before.
func (h *handoff) findLost(ctx context.Context, ids []string, leases []int64, lost []*store.Job) ([]*store.Job, error) {
	rows, err := h.s.pool.Query(ctx, h.unserved, ids, leases)
	if err != nil {
		return lost, err
	}
	defer rows.Close()
	for rows.Next() {
		var j store.Job
		if err := rows.Scan(&j.ID, &j.Attempt, &j.ClaimToken); err != nil {
			return lost, err
		}
		if h.settle(j.ClaimToken, h.settleUntil(tokenWaiter(j.ClaimToken))) {
			lost = append(lost, &j)
		}
	}
	return lost, rows.Err()
}

// retryGiveBack has jobs (settled, their return failed) and the jobs handed and not received
// given back by giveBackLost, tried again after a pause (doubled up to retryMax at each failure)
// until it goes through or the store closes. The listener may stay up all along, so nothing else
// would try again before the jobs' leases ended and the rescue counted the attempts of jobs that
// never ran. One loop runs at a time; a failure meanwhile adds its jobs to it.
func (h *handoff) retryGiveBack(jobs []*store.Job) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failed = append(h.failed, jobs...)
	if h.retrying || h.closing {
		return
	}
	h.retrying = true
	go h.retryLoop()
}

func (h *handoff) retryLoop() {
	pause := retryFirst
	for {
		t := time.NewTimer(pause)
		select {
		case <-h.closed:
			t.Stop()
			h.mu.Lock()
			h.retrying = false
			h.mu.Unlock()
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		err := h.giveBackLost(ctx)
		cancel()
		h.mu.Lock()
		if err == nil && len(h.failed) == 0 {
			h.retrying = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		pause = min(2*pause, retryMax)
	}
}

// ids returns the ids of every waiter.
func (h *handoff) ids() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := make([]string, 0, len(h.byID))
	for id := range h.byID {
		ids = append(ids, id)
	}
	return ids
}

// tryHandoff reports whether a single insert of a job of kind into queue tries the hand-off at now.
func (h *handoff) tryHandoff(queue, kind string, now time.Time) bool {
	v, ok := h.quiet.Load(queue + "\x00" + kind)
	return !ok || now.UnixNano() >= v.(int64)
}

// missed records that a single insert of a job of kind into queue found nobody waiting at now.
func (h *handoff) missed(queue, kind string, now time.Time) {
	if h.quietFor > 0 {
		h.quiet.Store(queue+"\x00"+kind, now.Add(h.quietFor).UnixNano())
	}
}

// queueNotified marks the waiters of queue as notified (see waiter.notified).
func (h *handoff) queueNotified(queue string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.waiters {
		if w.params.Queue == queue {
			w.notified.Store(true)
		}
	}
}

// listenerUp and listenerDown follow the notifier's listener: notifications sent while it does not
// listen are lost, so the advertisements go when it stops listening and come back with the
// producers' next claims once it listens again.
// A job handed while the listener did not listen is given back once the advertisements are gone
// (no job is handed after), when the listener stops or, failing that, before it listens again.
func (h *handoff) listenerUp() {
	if h == nil {
		return
	}
	failed := false
	if h.unsure.Load() {
		failed = !h.withdrawAndGiveBack()
		h.unsure.Store(failed)
	}
	h.listening.Store(true)
	if failed {
		// Listening now, nothing else would try again before the next reconnect.
		h.retryGiveBack(nil)
	}
}

func (h *handoff) listenerDown() {
	if h == nil || !h.listening.Swap(false) {
		return
	}
	h.gen.Add(1)
	if !h.withdrawAndGiveBack() {
		h.unsure.Store(true)
	}
}

// withdrawAndGiveBack withdraws every advertisement, then gives back the jobs handed and not
// received, and reports whether both went through.
func (h *handoff) withdrawAndGiveBack() bool {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	return h.withdraw(ctx, h.ids()) == nil && h.giveBackLost(ctx) == nil
}

// afterClaim withdraws an advertisement a claim through w, begun in generation gen (waiterGen),
// may have written after the listener stopped listening (or the store closed) since the claim
// began: that withdrawal missed it, and a job handed to it before the listener listened again was
// lost with its notification. Such a job is given back now when the listener listens again already
// (listenerUp, which may have run first, found nothing to do), or else before it does. It runs
// after every claim statement that may have advertised, a failed one's too: the statement may have
// committed before the error (a row not read, the connection lost with the answer in flight).
func (h *handoff) afterClaim(ctx context.Context, w *waiter, gen uint64) {
	if h.listening.Load() && h.gen.Load() == gen {
		return
	}
	h.unsure.Store(true)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if h.withdraw(ctx, []string{w.id}) != nil {
		return
	}
	// Set after unsure: listenerUp looked at unsure before, or will give the jobs back itself. A
	// closed store's listener listens no more.
	h.mu.Lock()
	closing := h.closing
	h.mu.Unlock()
	if (h.listening.Load() || closing) && h.giveBackLost(ctx) != nil && !closing {
		h.retryGiveBack(nil)
	}
}

// close withdraws every advertisement and returns the jobs handed and not taken, and those handed
// in the moment before the withdrawal whose notifications the closing listener misses.
func (h *handoff) close() {
	if h == nil {
		return
	}
	h.mu.Lock()
	if !h.closing {
		close(h.closed) // a retry loop ends; this close tries once more
	}
	h.closing = true
	h.gen.Add(1) // a claim running advertised perhaps after the withdrawal below (afterClaim)
	ws := make([]*waiter, 0, len(h.waiters))
	for _, w := range h.waiters {
		ws = append(ws, w)
	}
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	ids := make([]string, len(ws))
	var left []*store.Job
	for i, w := range ws {
		ids[i] = w.id
		left = append(left, w.buf.Drain()...)
	}
	if h.withdraw(ctx, ids) == nil {
		_ = h.giveBackLost(ctx)
	}
	h.s.release(ctx, left)
}

// received handles a notification on the hand-off channel: "<waiter id> <job>" (handedPayload).
// A job for a waiter this store no longer has, or handed while it closes, goes back at once.
func (h *handoff) received(payload string) {
	if lose := h.lose.Load(); lose != nil && (*lose)(payload) {
		return
	}
	id, body, ok := strings.Cut(payload, " ")
	if !ok {
		h.s.log.Warn("pronto: hand-off: ignoring malformed notification", "schema", h.s.schema, "payload", payload)
		return
	}
	j, full, err := decodeHanded([]byte(body))
	if err != nil {
		h.s.log.Warn("pronto: hand-off: ignoring malformed notification", "schema", h.s.schema, "error", err)
		return
	}
	if !h.settle(j.ClaimToken, h.settleUntil(id)) {
		return // given back already (giveBackLost)
	}
	if !full {
		// Too large for a notification: read it, off the listener's goroutine.
		go h.fetch(id, j)
		return
	}
	h.deliver(id, j)
}

func (h *handoff) deliver(id string, j *store.Job) {
	h.mu.Lock()
	w := h.byID[id]
	closing := h.closing
	h.mu.Unlock()
	if w == nil || closing {
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		if h.s.release(ctx, []*store.Job{j}) != nil {
			h.retryGiveBack([]*store.Job{j})
		}
		return
	}
	w.keep(j)
}

// fetch reads a handed job that its notification names only, and delivers it.
func (h *handoff) fetch(id string, ref *store.Job) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	var jobs []*store.Job
	err := errFetchFailed
	if !h.failFetch.Load() {
		var rows pgx.Rows
		rows, err = h.s.pool.Query(ctx, h.s.q.handedJob, ref.ID, ref.ClaimToken)
		if err == nil {
			jobs, err = scanJobs(rows)
		}
	}
	if err != nil {
		// Not read: not received, so given back with the others not received (now, should the
		// database answer again, or else when the listener next reconnects or the store closes).
		h.s.log.Warn("pronto: hand-off: reading a handed job", "schema", h.s.schema, "job", ref.ID, "error", err)
		h.unsettle(ref.ClaimToken)
		retryCtx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		if h.giveBackLost(retryCtx) != nil {
			h.unsure.Store(true) // tried again before the listener next listens
			h.retryGiveBack(nil) // and meanwhile, the listener up
		}
		return
	}
	if len(jobs) == 1 {
		h.deliver(id, jobs[0])
	}
}

// release returns claimed jobs that no worker ran to available, refunding the attempt (Finish
// announces their queues), and returns Finish's error.
func (s *Store) release(ctx context.Context, jobs []*store.Job) error {
	if len(jobs) == 0 {
		return nil
	}
	cs := make([]store.Completion, len(jobs))
	for i, j := range jobs {
		cs[i] = store.Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateAvailable, RefundAttempt: true}
	}
	_, err := s.Finish(ctx, cs)
	if err != nil {
		s.log.Warn("pronto: hand-off: returning unserved jobs", "schema", s.schema, "jobs", len(jobs), "error", err)
	}
	return err
}

var errHanded = errors.New("malformed handed job")

// errFetchFailed is the error of a read of a handed job failed by failFetch.
var errFetchFailed = errors.New("reading the handed job failed (test)")

// decodeHanded reads handedPayload: the job's 31 columns, or only its id and claim token (full
// false) when the job was too large for a notification. The payload is split and its scalars read
// with jsonscan, its JSON columns handed on as PostgreSQL wrote them (as a claim's rows are):
// encoding/json took 24 µs and 85 allocations a job, about a seventh of a worker's CPU at 300
// jobs/s; this takes 3.7 µs and 15 (BenchmarkDecodeHanded). A malformed payload is an error.
func decodeHanded(b []byte) (j *store.Job, full bool, err error) {
	var buf [31][]byte
	cols, ok := jsonscan.SplitArray(b, buf[:0])
	if !ok {
		return nil, false, errHanded
	}
	if len(cols) == 2 {
		id, ok1 := jsonscan.Text(cols[0])
		token, ok2 := jsonscan.Text(cols[1])
		if !ok1 || !ok2 {
			return nil, false, errHanded
		}
		return &store.Job{ID: id, ClaimToken: token}, false, nil
	}
	if len(cols) != len(jobColOIDs) {
		return nil, false, fmt.Errorf("%w: %d columns", errHanded, len(cols))
	}
	var r jobRow
	d := handedDecoder{cols: cols}
	d.uuid(0, &r.id)
	d.text(1, &r.kind)
	d.text(2, &r.queue)
	r.args = d.raw(3)
	r.meta = d.raw(4)
	d.int4(5, &r.priority)
	d.text(6, &r.state)
	d.int4(7, &r.attempt)
	d.int4(8, &r.maxAttempts)
	r.errors = d.raw(9)
	r.result = d.raw(10)
	r.tags = d.strings(11)
	r.retryPolicy = d.raw(12)
	d.int8(13, &r.timeoutMS)
	for i, t := range []*pgtype.Timestamptz{&r.createdAt, &r.scheduledAt, &r.startedAt, &r.completedAt, &r.expiresAt, &r.leaseExpiresAt} {
		d.time(14+i, t)
	}
	d.text(20, &r.workerID)
	d.text(21, &r.uniqueKey)
	d.text(22, &r.tenant)
	d.text(23, &r.rateKey)
	d.text(24, &r.workflowID)
	for _, s := range d.strings(25) {
		u, ok := parseUUID(s)
		if !ok {
			d.fail()
		}
		r.parentIDs = append(r.parentIDs, u)
	}
	r.uniqueStates = d.strings(26)
	d.time(27, &r.uniqueUntil)
	d.text(28, &r.runOn)
	r.parentResults = d.raw(29)
	d.uuid(30, &r.claimToken)
	if d.err != nil {
		return nil, false, d.err
	}
	j, err = r.job()
	return j, err == nil, err
}

// handedDecoder reads the columns of a handed job, keeping the first error.
type handedDecoder struct {
	cols [][]byte
	err  error
}

func (d *handedDecoder) fail() {
	if d.err == nil {
		d.err = errHanded
	}
}

func isNull(m []byte) bool { return len(m) == 0 || string(m) == "null" }

func (d *handedDecoder) raw(i int) []byte {
	if isNull(d.cols[i]) {
		return nil
	}
	return d.cols[i]
}

func (d *handedDecoder) text(i int, t *pgtype.Text) {
	if isNull(d.cols[i]) {
		return
	}
	s, ok := jsonscan.Text(d.cols[i])
	if !ok {
		d.fail()
	}
	*t = pgtype.Text{String: s, Valid: true}
}

func (d *handedDecoder) strings(i int) []string {
	if isNull(d.cols[i]) {
		return nil
	}
	var buf [8][]byte
	vs, ok := jsonscan.SplitArray(d.cols[i], buf[:0])
	if !ok {
		d.fail()
		return nil
	}
	out := make([]string, len(vs))
	for k, v := range vs {
		s, ok := jsonscan.Text(v)
		if !ok {
			d.fail()
		}
		out[k] = s
	}
	return out
}

func (d *handedDecoder) int8(i int, n *pgtype.Int8) {
	if isNull(d.cols[i]) {
		return
	}
	v, ok := jsonscan.Int(d.cols[i])
	if !ok {
		d.fail()
	}
	*n = pgtype.Int8{Int64: v, Valid: true}
}

func (d *handedDecoder) int4(i int, n *pgtype.Int4) {
	var v pgtype.Int8
	d.int8(i, &v)
	if v.Int64 != int64(int32(v.Int64)) {
		d.fail()
	}
	*n = pgtype.Int4{Int32: int32(v.Int64), Valid: v.Valid}
}

func (d *handedDecoder) time(i int, t *pgtype.Timestamptz) {
	var us pgtype.Int8
	d.int8(i, &us)
	if us.Valid {
		*t = pgtype.Timestamptz{Time: time.UnixMicro(us.Int64), Valid: true}
	}
}

func (d *handedDecoder) uuid(i int, u *pgtype.UUID) {
	var s pgtype.Text
	d.text(i, &s)
	if !s.Valid {
		return
	}
	v, ok := parseUUID(s.String)
	if !ok {
		d.fail()
	}
	*u = v
}
