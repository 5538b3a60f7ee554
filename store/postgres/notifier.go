package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pronto-jobs/pronto/internal/notifyhub"
	"github.com/pronto-jobs/pronto/store"
)

// Listener tuning.
const (
	// listenerBackoffMin and listenerBackoffMax bound the wait between reconnection attempts.
	listenerBackoffMin = 50 * time.Millisecond
	listenerBackoffMax = 5 * time.Second
	// subscribeWait bounds how long the first Subscribe waits for the listener to be listening, so a
	// notification sent right after Subscribe returns is not missed.
	subscribeWait = 10 * time.Second
	// listenerConnectTimeout bounds one connection attempt (dial, start-up and LISTEN).
	listenerConnectTimeout = 10 * time.Second
	// listenerIdleCheck is how long the listener waits quietly before it pings its connection, so a
	// connection that died silently (a network partition, no RST) is replaced within about this long.
	listenerIdleCheck = 30 * time.Second
	// listenerPingTimeout bounds that ping.
	listenerPingTimeout = 5 * time.Second
)

// payload is the compact JSON of a notification on the store's channel:
//
//	{"k":"i","q":"default","n":7,"d":0}  insert: jobs claimable (d 0) or due at d (unix ms) in queue q;
//	                                     n, the nonce, only on inserts by Insert (see store.Notification)
//	{"k":"c","id":"<job id>","t":"<claim token>"}  cancel of an active job's run
//	{"k":"p","q":"default"}              pause
//	{"k":"r","q":"default"}              resume
//	{"k":"h","c":"<client>","q":"default","f":"<kinds>"}  presence of a client working queue q
//	{"k":"g","c":"<client>"}             a client is gone
//	{"k":"o","c":"<client>","q":"default"}  a client has no free worker for jobs it was to claim
type payload struct {
	K  string `json:"k"`
	C  string `json:"c,omitempty"`
	Q  string `json:"q,omitempty"`
	N  uint32 `json:"n,omitempty"`
	F  string `json:"f,omitempty"`
	D  int64  `json:"d,omitempty"`
	ID string `json:"id,omitempty"`
	T  string `json:"t,omitempty"`
}

// insertPayload encodes the insert notification of queue, due at dueAt (zero: now), with a fresh
// random nonce.
func insertPayload(queue string, dueAt time.Time) string {
	p := payload{K: "i", Q: queue, N: rand.Uint32() | 1}
	if !dueAt.IsZero() {
		p.D = dueAt.UnixMilli()
	}
	b, _ := json.Marshal(p) // a struct of strings and integers always encodes
	if p.D == 0 {
		// Keep "d" explicit so every insert payload has the same shape.
		b = append(b[:len(b)-1], `,"d":0}`...)
	}
	return string(b)
}

// signalKinds maps the client signals to their payload kinds.
var signalKinds = map[store.NotificationKind]string{
	store.NotifyPresence: "h", store.NotifyGone: "g", store.NotifyOverflow: "o",
}

// signalPayload encodes a client signal.
func signalPayload(n store.Notification) string {
	b, _ := json.Marshal(payload{K: signalKinds[n.Kind], C: n.Client, Q: n.Queue, F: n.Fingerprint})
	return string(b)
}

// queuePayload encodes a pause ("p") or resume ("r") notification.
func queuePayload(kind, queue string) string {
	b, _ := json.Marshal(payload{K: kind, Q: queue})
	return string(b)
}

// decodePayload turns a payload into a notification; ok is false for anything unrecognized.
func decodePayload(s string) (n store.Notification, ok bool) {
	if n, ok := decodeInsertPayload(s); ok {
		return n, true
	}
	var p payload
	if err := json.Unmarshal([]byte(s), &p); err != nil {
		return n, false
	}
	switch p.K {
	case "i":
		n = store.Notification{Kind: store.NotifyInsert, Queue: p.Q, Nonce: p.N}
		if p.D != 0 {
			n.DueAt = time.UnixMilli(p.D)
		}
	case "c":
		n = store.Notification{Kind: store.NotifyCancel, JobID: p.ID, ClaimToken: p.T}
	case "p":
		n = store.Notification{Kind: store.NotifyPause, Queue: p.Q}
	case "r":
		n = store.Notification{Kind: store.NotifyResume, Queue: p.Q}
	case "h":
		n = store.Notification{Kind: store.NotifyPresence, Client: p.C, Queue: p.Q, Fingerprint: p.F}
	case "g":
		n = store.Notification{Kind: store.NotifyGone, Client: p.C}
	case "o":
		n = store.Notification{Kind: store.NotifyOverflow, Client: p.C, Queue: p.Q}
	default:
		return n, false
	}
	return n, true
}

// decodeInsertPayload decodes the insert payloads this store writes, {"k":"i","q":"<queue>",
// "n":<nonce>,"d":<due>} with n optional, without encoding/json: at a few hundred jobs a second the
// listener spends a noticeable share of its CPU decoding them. ok is false for any other shape
// (other kinds, a queue name with an escape), which decodePayload then decodes in full.
func decodeInsertPayload(s string) (n store.Notification, ok bool) {
	const head = `{"k":"i","q":"`
	rest, found := strings.CutPrefix(s, head)
	if !found {
		return n, false
	}
	end := strings.IndexAny(rest, `"\`)
	if end < 0 || rest[end] != '"' {
		return n, false
	}
	n = store.Notification{Kind: store.NotifyInsert, Queue: rest[:end]}
	rest = rest[end+1:]
	if after, found := strings.CutPrefix(rest, `,"n":`); found {
		v, tail, good := leadingUint(after)
		if !good || v > math.MaxUint32 {
			return n, false
		}
		n.Nonce, rest = uint32(v), tail
	}
	after, found := strings.CutPrefix(rest, `,"d":`)
	if !found {
		return n, false
	}
	d, tail, good := leadingUint(after)
	if !good || tail != "}" || d > math.MaxInt64/2 {
		return n, false
	}
	if d != 0 {
		n.DueAt = time.UnixMilli(int64(d))
	}
	return n, true
}

// leadingUint reads the decimal digits at the start of s (at least one, at most 19).
func leadingUint(s string) (v uint64, rest string, ok bool) {
	i := 0
	for i < len(s) && i < 19 && s[i] >= '0' && s[i] <= '9' {
		v = v*10 + uint64(s[i]-'0')
		i++
	}
	return v, s[i:], i > 0 && (i == len(s) || s[i] < '0' || s[i] > '9')
}

// notifier is the store's store.Notifier. It runs a listener (a dedicated connection, not one of
// the pool's) while it has subscribers, and delivers through a notifyhub.Hub.
type notifier struct {
	s   *Store
	hub notifyhub.Hub

	// idleCheck is listenerIdleCheck, per notifier so a test can shorten it.
	idleCheck time.Duration

	mu      sync.Mutex
	subs    int
	closed  bool
	current *listener
	wg      sync.WaitGroup
}

func newNotifier(s *Store) *notifier { return &notifier{s: s, idleCheck: listenerIdleCheck} }

// Notifier returns the store's notifier. Its listener connection starts with the first subscriber
// and stops when the last one leaves or the store closes. After every (re)connection it publishes
// store.NotifyReconnect, since notifications sent while it was not listening are lost.
func (s *Store) Notifier() store.Notifier { return s.notifier }

// ListenerPID returns the backend process id of the listener connection, or 0 when it is not
// connected. Tests use it to kill the connection with pg_terminate_backend.
func (s *Store) ListenerPID() uint32 {
	s.notifier.mu.Lock()
	l := s.notifier.current
	s.notifier.mu.Unlock()
	if l == nil {
		return 0
	}
	return l.pid.Load()
}

// Signal publishes client signals on the store's channel, in one statement on the pool: every
// listening process receives them, this one included.
func (n *notifier) Signal(ctx context.Context, ns []store.Notification) error {
	if err := notifyhub.CheckSignals(ns); err != nil {
		return err
	}
	if len(ns) == 0 {
		return nil
	}
	payloads := make([]string, len(ns))
	for i, note := range ns {
		payloads[i] = signalPayload(note)
	}
	if _, err := n.s.pool.Exec(ctx, n.s.q.notifyMany, payloads); err != nil {
		return fmt.Errorf("postgres: signal: %w", err)
	}
	return nil
}

// Subscribe registers fn for every notification until the returned function is called. The first
// subscriber starts the listener and waits (boundedly) until it listens, so a notification sent
// after Subscribe returns is delivered.
func (n *notifier) Subscribe(fn func(store.Notification)) func() {
	unsubscribe := n.hub.Subscribe(fn)
	n.mu.Lock()
	n.subs++
	if n.current == nil && !n.closed {
		n.current = n.startLocked()
	}
	l := n.current
	n.mu.Unlock()
	if l != nil {
		select {
		case <-l.ready:
		case <-time.After(subscribeWait):
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			unsubscribe()
			n.mu.Lock()
			n.subs--
			if n.subs == 0 && n.current != nil {
				n.current.cancel()
				n.current = nil
			}
			n.mu.Unlock()
		})
	}
}

// close stops the listener for good and waits for every listener goroutine to exit.
func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	if n.current != nil {
		n.current.cancel()
		n.current = nil
	}
	n.mu.Unlock()
	n.wg.Wait()
}

// listener is one run of the listening goroutine, from its start to its stop.
type listener struct {
	cancel context.CancelFunc
	ready  chan struct{} // closed after the first connection attempt, successful or not
	pid    atomic.Uint32
}

func (n *notifier) startLocked() *listener {
	ctx, cancel := context.WithCancel(context.Background())
	l := &listener{cancel: cancel, ready: make(chan struct{})}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.run(ctx, l)
	}()
	return l
}

// run connects, listens and delivers until ctx ends, reconnecting with bounded backoff.
func (n *notifier) run(ctx context.Context, l *listener) {
	readyOnce := sync.OnceFunc(func() { close(l.ready) })
	defer readyOnce()
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		conn, err := n.connect(ctx)
		if err != nil {
			readyOnce()
			if ctx.Err() != nil {
				return
			}
			backoff = min(max(backoff*2, listenerBackoffMin), listenerBackoffMax)
			n.s.log.Warn("pronto: notification listener cannot connect", "schema", n.s.schema,
				"error", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		l.pid.Store(conn.PgConn().PID())
		n.s.handoff.listenerUp()
		readyOnce()
		n.hub.Publish(store.Notification{Kind: store.NotifyReconnect})
		err = n.receive(ctx, conn)
		l.pid.Store(0)
		n.s.handoff.listenerDown()
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(closeCtx)
		cancel()
		if ctx.Err() == nil {
			n.s.log.Warn("pronto: notification listener lost its connection", "schema", n.s.schema, "error", err)
		}
	}
}

// connect opens the listener's own connection, from Config.ListenURL or else the pool's
// configuration, and listens.
func (n *notifier) connect(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, listenerConnectTimeout)
	defer cancel()
	var cfg *pgx.ConnConfig
	if n.s.listenConfig != nil {
		cfg = n.s.listenConfig.Copy()
	} else {
		cfg = n.s.pool.Config().ConnConfig.Copy()
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	listen := "LISTEN " + pgx.Identifier{n.s.channel}.Sanitize()
	if n.s.handoff != nil {
		listen += "; LISTEN " + pgx.Identifier{n.s.handoff.channel}.Sanitize()
	}
	if _, err := conn.Exec(ctx, listen); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return conn, nil
}

// receive delivers notifications until the connection fails or ctx ends. After listenerIdleCheck
// without a notification it pings the server: a wait that times out leaves the connection usable.
func (n *notifier) receive(ctx context.Context, conn *pgx.Conn) error {
	for {
		waitCtx, cancel := context.WithTimeout(ctx, n.idleCheck)
		msg, err := conn.WaitForNotification(waitCtx)
		cancel()
		if err != nil {
			if ctx.Err() != nil || waitCtx.Err() == nil || conn.IsClosed() {
				return err
			}
			pingCtx, cancel := context.WithTimeout(ctx, listenerPingTimeout)
			err = conn.Ping(pingCtx)
			cancel()
			if err != nil {
				return err
			}
			continue
		}
		if msg.Channel != n.s.channel {
			if h := n.s.handoff; h != nil && msg.Channel == h.channel {
				h.received(msg.Payload)
			}
			continue
		}
		note, ok := decodePayload(msg.Payload)
		if !ok {
			n.s.log.Warn("pronto: ignoring malformed notification", "schema", n.s.schema, "payload", msg.Payload)
			continue
		}
		if h := n.s.handoff; h != nil {
			switch note.Kind {
			case store.NotifyInsert:
				h.queueNotified(note.Queue)
			case store.NotifyCancel:
				h.heardCancel(note.JobID, note.ClaimToken)
			}
		}
		n.hub.Publish(note)
	}
}

// cancelPayload encodes the cancel notification of job id's run under claim token, as the SQL
// statements write it.
func cancelPayload(id, token string) string {
	b, _ := json.Marshal(payload{K: "c", ID: id, T: token})
	return string(b)
}
