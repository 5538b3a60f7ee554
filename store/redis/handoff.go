package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto/internal/handoffbuf"
	"github.com/pronto-jobs/pronto/store"
)

// Hand-off: pickup in one hop on a single node.
//
// A claim for one worker that leaves slots free (it took fewer jobs than its limit) advertises its
// producer as waiting: the queue's sorted set B.."wait" gets the waiter's id, scored by when the
// advertisement lapses, and the list B.."w:"..id the claim arguments to use for it (limit 1, the
// worker, the lease plus handoffSlack, the kinds, a fresh claim token, the global flag). A full
// claim withdraws it. The single insert (scriptInsertOne) then runs the claim itself for the
// earliest-lapsing waiter, in the same script, and pushes the claimed job onto the waiter's inbox
// list B.."in:"..id; when that claim took the inserted job the insert publishes nothing. A
// goroutine per waiter blocks on the inbox (BLMOVE on a connection of its own), keeps the job and
// wakes the store's subscribers, whose producer's next Claim returns it without a round trip.
//
// The pop moves the job onto the waiter's list B.."got:"..id, which it leaves once kept: a reply
// lost in flight (the connection failing, or the store closing, as Redis answers) leaves the job
// there, and the waiter gives it back, unstarted and its attempt refunded, when it takes a new
// connection (again at each turn until that succeeds) or the store closes (see giveBackGot).
//
// Nothing a waiter writes outlives its process by long. The inbox expires 60 s after its latest push
// (the insert sets it; so does Close's stop marker). A pop's destination cannot be given an expiry
// by the pop, so the got list always holds one entry of its own (gotMarker) and its expiry is
// renewed by the waiter before it pops whenever a quarter of it has passed (keepGot): the pop then
// moves jobs onto a list that expires gotTTL after the waiter last renewed it, so a process that dies
// between a pop and the removal leaves that list (its job is rescued at lease end) for at most
// gotTTL. The advertisement's claim arguments expire with it, and the queue's set of
// advertisements expires once every advertisement in it has lapsed; a lapsed one is dropped by the
// next insert or advertising claim in the queue meanwhile.
//
// The claim in the insert is the Claim script (claimjobs), so the same rules decide what is claimed
// (kinds, priority, paused queues, rate limits, tenant turns and limits) and the job is active under
// a lease and a claim token like any claimed job. A process that dies holding a handed job (in its
// inbox or its buffer) loses it as it loses any claimed job: the rescuer takes it back when its
// lease ends. An advertisement lapses adTTL after the claim that wrote it (the producers' poll
// rewrites it well before), so a dead process is handed jobs for at most that long.
//
// The client reckons a job's lease from when its Claim call began, which for a handed job is after
// the lease began in Redis: the hand-off's lease is longer by handoffSlack, and a handed job not
// taken by a Claim within serveWithin (its producer is busy or stopped) is returned to available
// (the attempt refunded) instead of being served late; its advertisement is withdrawn with it.
const (
	adTTL        = 10 * time.Second
	handoffSlack = 250 * time.Millisecond
	serveWithin  = 100 * time.Millisecond
	// waitBlock is the longest one pop (BLMOVE) blocks; the waiter then checks whether the store
	// is closing.
	waitBlock = 5 * time.Second
	// gotTTL is how long a waiter's got list outlives the waiter's latest renewal of it (keepGot):
	// as long as the inbox's expiry, well above waitBlock, so a live waiter renews it many times over.
	gotTTL = 60 * time.Second
	// inboxTTL is the inbox's expiry after its latest push (the insert script's PEXPIRE says 60000).
	inboxTTL = 60 * time.Second
	// releaseTimeout bounds a waiter's returning of jobs and withdrawing of its advertisement, which
	// run under a context of their own: Close cancels the waiters' context, and a return it cut
	// short would leave jobs taken from the buffer or the inbox active until their leases end.
	releaseTimeout = 5 * time.Second
)

// adMarker starts the advertisement arguments of a claim (after the global flag). A worker id
// cannot start with a newline, so it does not read as ClaimParams.WorkerIDs.
const adMarker = "\nad"

// stopMarker is pushed onto an inbox to end its waiter's pop when the store closes.
const stopMarker = "stop"

// gotMarker is the got list's own entry, which keeps the list, and so its expiry, in place between
// pops (see keepGot). Neither it nor stopMarker reads as a handed job, which starts with a length.
const gotMarker = "alive"

// loseHanded, set by tests only, is asked about every item a waiter pops from its inbox; true drops
// the reply as a connection failing with it in flight loses it (the waiter then reconnects), or
// does once the store closes.
var loseHanded atomic.Pointer[func(w *waiter) bool]

// failGiveBack, set by tests only, is asked each time a waiter gives back its got list, once the
// list is read; true fails the give-back there, as Redis failing between the read and the release.
var failGiveBack atomic.Pointer[func(w *waiter) bool]

// handoffStep, set by tests only, is called as a waiter retires ("retire": it found itself unused,
// before its cleanup), returns jobs its producer did not take ("expire": taken from the buffer,
// not yet returned), as a producer's claim through it is about to run ("claim"), and as its pop
// returned an item, before it is kept and leaves the got list ("popped").
var handoffStep atomic.Pointer[func(w *waiter, step string)]

// errReplyLost is the error a lost reply (loseHanded) stands for.
var errReplyLost = errors.New("reply lost (test)")

// waiter is one producer's hand-off: a queue, worker, lease and kinds as its claims give them.
type waiter struct {
	s      *Store
	queue  string
	id     string
	params store.ClaimParams // Limit unset; Kinds sorted

	buf handoffbuf.Buffer
	// taken carries the free slots left after a Claim took handed jobs (buffered 1, latest wins).
	taken chan int
	done  chan struct{}
	// used is when a claim last went through this waiter (UnixNano): a waiter no claim used for
	// adTTL retires, its producer gone.
	used atomic.Int64
	// kept holds the claim tokens of the jobs received and kept that may still be on the got list
	// (their removal failed): they are the producer's, never given back from that list. Only the
	// waiter's goroutine uses it, and cleanup once that goroutine is done.
	kept map[string]bool
	// renewed is when keepGot last renewed the got list's expiry (zero: renew before the next pop).
	// Only the waiter's goroutine uses it.
	renewed time.Time
}

// handoffOn reports whether the store hands jobs off: on a single node (the single insert is a
// single-node script) reached through a *redis.Client, whose connections can be dedicated.
func (s *Store) handoffOn() bool {
	_, ok := s.rdb.(*goredis.Client)
	return ok && !s.noHandoff
}

// waiterFor returns the waiter of a claim for one worker, starting it on first use.
func (s *Store) waiterFor(p *store.ClaimParams, kinds []string) *waiter {
	key := p.Queue + "\x00" + p.WorkerID + "\x00" + strconv.FormatInt(int64(p.LeaseDuration), 10) + "\x00" + strings.Join(kinds, "\x00")
	s.waitersMu.Lock()
	defer s.waitersMu.Unlock()
	if s.closing {
		return nil
	}
	if w := s.waiters[key]; w != nil {
		w.used.Store(time.Now().UnixNano())
		return w
	}
	// Each waiter holds a connection of the pool while it waits: at most a quarter of them.
	if len(s.waiters) >= s.rdb.(*goredis.Client).Options().PoolSize/4 {
		return nil
	}
	if s.waiters == nil {
		s.waiters = make(map[string]*waiter)
	}
	w := &waiter{s: s, queue: p.Queue, id: tokens(1)[0],
		params: store.ClaimParams{Queue: p.Queue, Kinds: kinds, WorkerID: p.WorkerID, LeaseDuration: p.LeaseDuration,
			OnHeldBack: p.OnHeldBack},
		taken: make(chan int, 1), done: make(chan struct{}), kept: make(map[string]bool)}
	w.used.Store(time.Now().UnixNano())
	s.waiters[key] = w
	go w.run(key)
	return w
}

// adArgs are the advertisement arguments of a claim by w's producer.
func (w *waiter) adArgs() []any {
	return []any{adMarker, w.id, adTTL.Microseconds(), (w.params.LeaseDuration + handoffSlack).Microseconds(), tokens(1)[0]}
}

func (w *waiter) inbox() string { return w.s.qkey(w.queue) + "in:" + w.id }

// got is the list the waiter's pops move handed jobs onto (see the hand-off's comment).
func (w *waiter) got() string { return w.s.qkey(w.queue) + "got:" + w.id }

// gotItems returns the handed jobs in the got list v not received and kept: their replies were lost.
func (w *waiter) gotItems(v []string) []*store.Job {
	var out []*store.Job
	for _, item := range v {
		if item == stopMarker || item == gotMarker {
			continue
		}
		j, err := decodeHanded(item)
		if err != nil {
			w.s.logf("redis: hand-off: %v", err)
			continue
		}
		if !w.kept[j.ClaimToken] {
			out = append(out, j)
		}
	}
	return out
}

// giveBackGot gives the jobs of the got list not received back to available, the attempt
// refunded (popped from the inbox, their replies never reached the waiter), then empties the list
// of what it read. It reports whether it did: a list it read and could not return is left whole
// for the next call, since no one else gives its jobs back. Only the waiter's goroutine writes
// the list, so nothing comes onto it meanwhile.
func (w *waiter) giveBackGot(ctx context.Context) bool {
	items, err := w.s.rdb.LRange(ctx, w.got(), 0, -1).Result()
	if err != nil {
		w.s.logf("redis: hand-off: read jobs handed to %s: %v", w.queue, err)
		return false
	}
	if fail := failGiveBack.Load(); fail != nil && (*fail)(w) {
		return false
	}
	if err := w.s.release(ctx, w.queue, w.gotItems(items)); err != nil {
		return false
	}
	if err := w.s.rdb.LTrim(ctx, w.got(), int64(len(items)), -1).Err(); err != nil {
		// Returned already: a second return is fenced by the claim tokens.
		w.s.logf("redis: hand-off: empty the jobs handed to %s: %v", w.queue, err)
		return false
	}
	clear(w.kept)
	w.renewed = time.Time{} // the trim took gotMarker: put it back before the next pop
	return true
}

// keepGot puts gotMarker at the head of the got list (once) and sets the list to expire gotTTL
// from now, in one transaction on the waiter's connection, so that the next pop moves its job onto
// a list that expires (see the hand-off's comment).
func (w *waiter) keepGot(ctx context.Context, conn *goredis.Conn) error {
	_, err := conn.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.LRem(ctx, w.got(), 0, gotMarker)
		p.LPush(ctx, w.got(), gotMarker)
		p.PExpire(ctx, w.got(), w.s.gotTTL)
		return nil
	})
	return err
}

// take returns up to limit handed jobs kept less than serveWithin, and tells the waiter how many
// slots the producer has left.
func (w *waiter) take(limit int) []*store.Job {
	return w.buf.Take(limit, w.s.serveWithin, time.Now(), func(taken int) {
		// Under the buffer's lock, so that the waiter, which looks at the buffer and taken together
		// (settled), never sees the buffer emptied by this take without its free slots: it would go
		// back to its inbox and the slots would wait for the next notification, while the producer,
		// whose claim came back short, believes the queue empty.
		select {
		case <-w.taken:
		default:
		}
		w.taken <- limit - taken
	})
}

// settled returns the free slots of a take not yet followed up (0 when none), and whether the
// waiter is done with its hand-off: no handed job kept and no free slots to claim for.
func (w *waiter) settled() (free int, done bool) {
	w.buf.Len(func(n int) {
		select {
		case free = <-w.taken:
		default:
		}
		done = free == 0 && n == 0
	})
	return free, done
}

// keep files handed jobs and wakes the store's subscribers (the producer claims, and gets them).
// It drops the jobs cancelled before they got here (the cancellation wrote their state already;
// the inbox and the notifications travel apart), and reports how many it kept.
func (w *waiter) keep(jobs []*store.Job) int {
	now := time.Now()
	kept := 0
	for _, j := range jobs {
		w.buf.Add(j, now)
		if !(w.s.cancels.Has(j.ID, j.ClaimToken, now) && w.buf.Remove(j.ID, j.ClaimToken)) {
			kept++
		}
	}
	if kept > 0 {
		w.s.hub.Publish(store.Notification{Kind: store.NotifyInsert, Queue: w.queue})
	}
	return kept
}

// heardCancel drops a cancelled run (the job's, under the notification's claim token) from the
// waiters' buffers: handed and not yet taken, it must not start. The cancellation is also
// remembered for a handed job still in an inbox, which keep then drops. A run taken already is the
// client's to stop.
func (s *Store) heardCancel(n store.Notification) {
	s.cancels.Add(n.JobID, n.ClaimToken, time.Now())
	s.waitersMu.Lock()
	ws := make([]*waiter, 0, len(s.waiters))
	for _, w := range s.waiters {
		if n.Queue == "" || w.queue == n.Queue {
			ws = append(ws, w)
		}
	}
	s.waitersMu.Unlock()
	for _, w := range ws {
		if w.buf.Remove(n.JobID, n.ClaimToken) {
			return
		}
	}
}

// run waits on the inbox until the store closes. After a hand-off it waits for the producer to take
// the job, then claims again for the slots the producer has left (which advertises it again when
// they stay free), or, when the job is not taken within serveWithin, returns it.
func (w *waiter) run(key string) {
	defer close(w.done)
	s := w.s
	ctx := s.waitCtx
	conn := s.rdb.(*goredis.Client).Conn()
	defer func() { _ = conn.Close() }()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	// unsure is set while the got list may hold a job whose reply was lost.
	unsure := false
	for ctx.Err() == nil {
		if unsure {
			unsure = !w.giveBackGot(ctx)
		}
		if now := time.Now(); now.Sub(w.renewed) >= s.gotTTL/4 {
			// Failing, it is tried again at the next turn; the pop below most likely fails too.
			if err := w.keepGot(ctx, conn); err != nil {
				if ctx.Err() == nil {
					s.logf("redis: hand-off: renew the list of jobs handed to %s: %v", w.queue, err)
				}
			} else {
				w.renewed = now
			}
		}
		r, err := conn.BLMove(ctx, w.inbox(), w.got(), "LEFT", "RIGHT", waitBlock).Result()
		if step := handoffStep.Load(); err == nil && step != nil {
			(*step)(w, "popped")
		}
		if lose := loseHanded.Load(); err == nil && lose != nil && (*lose)(w) {
			err = errReplyLost
		}
		if err != nil {
			if errors.Is(err, goredis.Nil) {
				if time.Since(time.Unix(0, w.used.Load())) > adTTL && w.retire(key) {
					return
				}
				continue
			}
			if ctx.Err() != nil {
				return
			}
			s.logf("redis: hand-off: wait on %s: %v", w.queue, err)
			unsure = true
			// A connection of its own stays broken once broken (go-redis does not reconnect it):
			// take a new one.
			_ = conn.Close()
			conn = s.rdb.(*goredis.Client).Conn()
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if r == stopMarker {
			continue
		}
		job, err := decodeHanded(r)
		if err != nil {
			s.logf("redis: hand-off: %v", err)
			continue
		}
		w.kept[job.ClaimToken] = true
		s.remember([]*store.Job{job})
		kept := w.keep([]*store.Job{job})
		// Received: the got list need not hold it any longer (a failure leaves it to giveBackGot,
		// which skips the jobs kept). Only this job leaves it: a job whose reply was lost before,
		// not given back yet (giveBackGot failed), stays there for the next giveBackGot.
		if err := conn.LRem(ctx, w.got(), 1, r).Err(); err == nil {
			delete(w.kept, job.ClaimToken)
		}
		if kept == 0 {
			// Cancelled on its way: nothing for the producer to take. The insert spent the
			// advertisement; withdrawing it leaves the next inserts to be announced until the
			// producer's next claim advertises again.
			w.expire()
			continue
		}
		free, wait := 0, true
		for {
			if wait {
				timer.Reset(s.serveWithin)
				select {
				case <-ctx.Done():
					timer.Stop()
					return
				case free = <-w.taken:
					timer.Stop()
				case <-timer.C:
					w.expire()
					free = 0
				}
			}
			wait = true
			if free > 0 && ctx.Err() == nil {
				// Not under ctx: once sent, a claim Close cancelled may still have run in Redis, and
				// a client that reported the cancellation instead of its answer would lose the jobs
				// it took (active, claimed by nobody, until their leases end). Answered, they are
				// kept, and the cleanup after this loop returns them.
				jobs, err := s.claim(context.WithoutCancel(ctx), store.ClaimParams{Queue: w.queue, Kinds: w.params.Kinds,
					Limit: free, WorkerID: w.params.WorkerID, LeaseDuration: w.params.LeaseDuration + handoffSlack,
					OnHeldBack: w.params.OnHeldBack}, w)
				if err != nil {
					s.logf("redis: hand-off: claim from %s: %v", w.queue, err)
				}
				if len(jobs) > 0 && w.keep(jobs) > 0 {
					continue
				}
			}
			// Jobs still held (the producer took fewer than were kept) are watched until taken or
			// returned, and the free slots of a take that came meanwhile are claimed for; then the
			// inbox again.
			var done bool
			if free, done = w.settled(); done {
				break
			}
			wait = free == 0
		}
	}
}

// expire returns the handed jobs the producer did not take within serveWithin to available, and
// withdraws the advertisement: the producer is busy or gone, and the next claim that leaves a slot
// free advertises it again. Close waits for it (see releaseTimeout).
func (w *waiter) expire() {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	stale := w.buf.Stale(w.s.serveWithin, time.Now())
	if step := handoffStep.Load(); step != nil {
		(*step)(w, "expire")
	}
	if err := w.s.rdb.ZRem(ctx, w.s.qkey(w.queue)+"wait", w.id).Err(); err != nil && ctx.Err() == nil {
		w.s.logf("redis: hand-off: withdraw from %s: %v", w.queue, err)
	}
	w.s.release(ctx, w.queue, stale)
}

// release returns claimed jobs that no worker ran to available, refunding the attempt, and
// announces their queue. It returns the return's error (not the announcement's).
func (s *Store) release(ctx context.Context, queue string, jobs []*store.Job) error {
	if len(jobs) == 0 {
		return nil
	}
	cs := make([]store.Completion, len(jobs))
	for i, j := range jobs {
		cs[i] = store.Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateAvailable, RefundAttempt: true}
	}
	if _, err := s.Finish(ctx, cs); err != nil {
		s.logf("redis: hand-off: return %d jobs of %s: %v", len(jobs), queue, err)
		return err
	}
	if err := s.publish(ctx, []store.Notification{{Kind: store.NotifyInsert, Queue: queue}}); err != nil {
		s.logf("redis: hand-off: announce %s: %v", queue, err)
	}
	return nil
}

// stopWaiters ends the waiters, withdraws their advertisements, and returns the jobs handed to them
// and not taken (kept, or still in their inboxes) to available.
func (s *Store) stopWaiters(ctx context.Context) {
	s.waitersMu.Lock()
	s.closing = true
	ws := make([]*waiter, 0, len(s.waiters))
	for _, w := range s.waiters {
		ws = append(ws, w)
	}
	s.waitersMu.Unlock()
	s.waitCancel()
	for _, w := range ws {
		// Ends a pop that the cancellation does not interrupt. The inbox expires as an insert's
		// push makes it, should the process die before cleanup deletes it.
		_, _ = s.rdb.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			p.RPush(ctx, w.inbox(), stopMarker)
			p.PExpire(ctx, w.inbox(), inboxTTL)
			return nil
		})
	}
	for _, w := range ws {
		<-w.done
		w.cleanup(ctx)
	}
}

// afterClaim withdraws the advertisement a producer's claim through w may have written after the
// waiter ended (the store closing, or the waiter retired), and returns the jobs handed to it since:
// nothing pops its inbox any more, so they would stay active until their leases end.
func (w *waiter) afterClaim() {
	select {
	case <-w.done:
	default:
		w.s.waitersMu.Lock()
		closing := w.s.closing
		w.s.waitersMu.Unlock()
		if !closing {
			// Ending later, the waiter cleans up after this claim: Close's cleanup (stopWaiters) or
			// retire's runs once the advertisement is written.
			return
		}
		<-w.done // soon: Close ended its pop; cleanup reads what only the waiter writes
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	w.cleanup(ctx)
}

// retire ends an unused waiter (see waiter.used) unless a claim took it meanwhile. The waiter
// stays in the store's map while it cleans up, so that a Close meanwhile waits for it (it cleans
// up again once the waiter ends), and the cleanup runs under a context of its own, which Close
// does not cancel. A claim that takes the waiter meanwhile keeps it: it goes on waiting, and that
// claim's advertisement, should the cleanup have withdrawn it, is written again by the next.
func (w *waiter) retire(key string) bool {
	s := w.s
	unused := func() bool {
		s.waitersMu.Lock()
		defer s.waitersMu.Unlock()
		return !s.closing && time.Since(time.Unix(0, w.used.Load())) > adTTL
	}
	if !unused() {
		return false
	}
	if step := handoffStep.Load(); step != nil {
		(*step)(w, "retire")
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	w.cleanup(ctx)
	s.waitersMu.Lock()
	defer s.waitersMu.Unlock()
	// waiterFor marks the waiter used under this lock: once it is found unused here and leaves the
	// map, no claim takes it any more.
	if s.closing || time.Since(time.Unix(0, w.used.Load())) <= adTTL {
		return false
	}
	delete(s.waiters, key)
	return true
}

// cleanup withdraws the waiter's advertisement and returns the jobs handed to it and not taken
// (kept, or still in its inbox) to available.
func (w *waiter) cleanup(ctx context.Context) {
	s := w.s
	left := w.buf.Drain()
	b := s.qkey(w.queue)
	var rest, got *goredis.StringSliceCmd
	_, err := s.rdb.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.ZRem(ctx, b+"wait", w.id)
		p.Del(ctx, b+"w:"+w.id)
		rest = p.LRange(ctx, w.inbox(), 0, -1)
		p.Del(ctx, w.inbox())
		got = p.LRange(ctx, w.got(), 0, -1)
		p.Del(ctx, w.got())
		return nil
	})
	if err != nil {
		s.logf("redis: hand-off: withdraw from %s: %v", w.queue, err)
		// The jobs kept are still returned; those in Redis lapse with their leases.
		s.release(ctx, w.queue, left)
		return
	}
	left = append(left, w.gotItems(got.Val())...)
	for _, v := range rest.Val() {
		if v == stopMarker {
			continue
		}
		if j, err := decodeHanded(v); err == nil {
			left = append(left, j)
		}
	}
	s.release(ctx, w.queue, left)
}

// decodeHanded reads a handed job: its hash's fields and values, each as <length>:<bytes>.
func decodeHanded(v string) (*store.Job, error) {
	var d jobDecoder
	var field string
	for i := 0; len(v) > 0; i++ {
		c := strings.IndexByte(v, ':')
		if c < 0 {
			return nil, fmt.Errorf("redis: hand-off: malformed job")
		}
		n, err := strconv.Atoi(v[:c])
		if err != nil || n < 0 || c+1+n > len(v) {
			return nil, fmt.Errorf("redis: hand-off: malformed job")
		}
		if i%2 == 0 {
			field = v[c+1 : c+1+n]
		} else {
			d.set(field, v[c+1:c+1+n])
		}
		v = v[c+1+n:]
	}
	j, err := d.job()
	if err != nil {
		return nil, err
	}
	if j == nil {
		return nil, fmt.Errorf("redis: hand-off: job without id")
	}
	return j, nil
}

// sortedKinds returns kinds sorted without duplicates (a kind named twice would make its jobs
// candidates twice).
func sortedKinds(kinds []string) []string {
	if len(kinds) > 1 {
		return slices.Compact(slices.Sorted(slices.Values(kinds)))
	}
	return kinds
}
