// Package redis is a store.Store on Redis (7 or newer), through go-redis v9's UniversalClient, so
// one code path serves a single node and a Redis Cluster.
//
// Each queue's keys share the hash tag {q:<queue>}, so one queue lives in one cluster slot and
// every transition of its jobs is one Lua script (scripts.go) run atomically by the server. Claims
// take a batch of jobs in one script call; outcomes are applied in batches, one script call per
// queue, pipelined. Two keys are global (outside any queue's slot): the id index, mapping a job id
// to its queue so that GetJob and the other by-id operations find the job's slot, and the queue
// registry that maintenance passes and listings walk. A workflow whose jobs share one queue lives
// in that queue's slot too, found by id through a workflow index beside the id index (features.go);
// on a Redis Cluster, rate and tenant limits live in their keys' own slots (ratelimit.go), and a
// workflow spanning queues is split into one part per queue whose outcomes reach the other parts
// through each queue's outbox (relay.go). See docs/redis.md for the data layout, durability and
// limits.
package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto/internal/cancelset"
	"github.com/pronto-jobs/pronto/internal/lostclaim"
	"github.com/pronto-jobs/pronto/internal/notifyhub"
	"github.com/pronto-jobs/pronto/store"
)

// DefaultPrefix starts every key the store writes unless Options.Prefix says otherwise.
const DefaultPrefix = "pronto:"

// Options configures a Store.
type Options struct {
	// Prefix starts every key (default DefaultPrefix). Stores with different prefixes share a Redis
	// without seeing each other's jobs. It must not contain '{' or '}' (they would move the hash tag).
	Prefix string
	// NoHandoff turns the hand-off off (see docs/redis.md, "Pickup"): every pickup is then a
	// notification and a claim.
	NoHandoff bool
	// Logger receives the errors of the store's background work (default: discarded).
	Logger *slog.Logger
}

// Store is a store.Store on Redis. Its methods are safe for concurrent use.
type Store struct {
	rdb    goredis.UniversalClient
	own    bool
	prefix string
	// idsK and queuesK are idsKey() and queuesKey(), kept for the single insert.
	idsK, queuesK string

	hub notifyhub.Hub
	ps  *subscription
	// subscribed is whether ps's subscription is up, as far as the store knows: from its
	// confirmation to a receive error (the single insert then skips publishing to itself alone).
	subscribed atomic.Bool
	// weightsSynced is when Cleanup last copied the tenant weights into every queue on a cluster
	// (UnixNano; tenant.go).
	weightsSynced atomic.Int64
	// sender marks the notifications this store publishes: it delivers them to its own subscribers
	// at once, and skips their echo from Redis.
	sender string

	// claims caches the queue of the jobs this store claimed, a hint for Finish and Heartbeat
	// (claimcache.go).
	claims claimCache
	// reconciled is when this store last checked each rate key's whole ledger (ratelimit.go).
	reconciledMu sync.Mutex
	reconciled   map[string]time.Time
	// needs remembers, per queue, the limit keys its last claim took permits of (ratelimit.go).
	needsMu sync.Mutex
	needs   map[string][]need
	// tenantLimits caches the tenants with a stored limit, read at tenantLimitsAt (ratelimit.go).
	tenantLimitsMu sync.Mutex
	tenantLimits   []string
	tenantLimitsAt time.Time
	cancel         context.CancelFunc
	done           chan struct{}
	closed         sync.Once

	logger    *slog.Logger
	noHandoff bool
	// waiters are the producers' hand-offs (handoff.go), by queue, worker, lease and kinds.
	waitersMu  sync.Mutex
	waiters    map[string]*waiter
	closing    bool
	waitCtx    context.Context
	waitCancel context.CancelFunc
	// cancels are the active jobs cancelled lately (see heardCancel).
	cancels cancelset.Set
	// serveWithin is the package's serveWithin, per store so a test can lengthen it; gotTTL the
	// package's, so a test can shorten it.
	serveWithin time.Duration
	gotTTL      time.Duration
	// lost returns the jobs of claims whose reply was lost (lostclaim.go).
	lost *lostclaim.Recovery[lostClaim]
	// relayWG counts the background removals of delivered outbox entries (relay.go).
	relayWG sync.WaitGroup
}

// Compile-time check that Store implements store.Store.
var _ store.Store = (*Store)(nil)

// Open connects to the Redis named by url (redis://[user:password@]host:port/db, or rediss:// for
// TLS, with go-redis's options as query parameters) and returns a store that closes its client on
// Close. The query parameter key_prefix sets Options.Prefix.
//
// A Redis Cluster is found by itself: a URL naming one node of a cluster (its INFO says
// cluster_enabled:1) opens a cluster client with that node as its seed, and a URL with addr
// query parameters (redis://host1:port?addr=host2:port&addr=host3:port) opens one with every
// address named as a seed. A cluster has database 0 only.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	url, prefix, err := splitPrefix(url)
	if err != nil {
		return nil, fmt.Errorf("redis: database url: %w", err)
	}
	if prefix != "" {
		opts.Prefix = prefix
	}
	rdb, err := dial(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("redis: database url: %w", err)
	}
	s, err := New(ctx, rdb, opts)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	s.own = true
	return s, nil
}

// contextTimeouts: the clients Open makes honour their callers' context deadlines
// (go-redis's ContextTimeoutEnabled, off by default), so that a request's deadline bounds a call to
// a Redis that stopped answering, rather than go-redis's own read timeout and retries.
//
// noRetries: they also never resend a command after a network error (go-redis's MaxRetries, 3 by
// default): a script whose reply was lost may have run, and running it again would apply it twice
// or, for an insert, report the job it stored as a duplicate. The error goes to the caller instead,
// as for any store whose database went away (store.IsUnavailable). A client passed to New is used
// as its maker configured it: set MaxRetries to -1 there too, and build a cluster client with
// NewClusterClient, since a cluster client resends by itself whatever its nodes' MaxRetries.
//
// dial returns a client for url: a cluster client when the URL names several seeds or its node
// says it is part of a cluster, else a client of the one node.
func dial(ctx context.Context, url string) (goredis.UniversalClient, error) {
	if hasSeeds(url) {
		return dialCluster(url)
	}
	o, err := goredis.ParseURL(url)
	if err != nil {
		return nil, urlError(err)
	}
	o.ContextTimeoutEnabled = true // see contextTimeouts
	o.MaxRetries = -1              // see noRetries
	// The probe uses database 0: a cluster node refuses to SELECT another. A node that does not
	// answer is reported by New, which checks that Redis answers.
	db := o.DB
	o.DB = 0
	probe := goredis.NewClient(o)
	info, err := probe.Info(ctx, "cluster").Result()
	if err == nil && strings.Contains(info, "cluster_enabled:1") {
		_ = probe.Close()
		if db != 0 {
			return nil, fmt.Errorf("database %d: a Redis Cluster has database 0 only", db)
		}
		return dialCluster(url)
	}
	if db == 0 {
		return probe, nil
	}
	_ = probe.Close()
	o.DB = db
	return goredis.NewClient(o), nil
}

// dialCluster returns a cluster client seeded by url's address and its addr parameters.
func dialCluster(url string) (goredis.UniversalClient, error) {
	o, err := goredis.ParseClusterURL(url)
	if err != nil {
		return nil, urlError(err)
	}
	return NewClusterClient(o), nil
}

// hasSeeds reports whether url names more nodes in addr query parameters (a Redis Cluster's seeds).
func hasSeeds(url string) bool {
	_, query, _ := strings.Cut(url, "?")
	q, err := neturl.ParseQuery(query)
	return err == nil && q.Has("addr")
}

// CheckURL reports whether url is a Redis URL Open accepts (redis:// or rediss://, with addr
// parameters for a cluster's seeds).
func CheckURL(url string) error {
	url, _, err := splitPrefix(url)
	if err != nil {
		return err
	}
	if hasSeeds(url) {
		_, err = goredis.ParseClusterURL(url)
	} else {
		_, err = goredis.ParseURL(url)
	}
	return urlError(err)
}

// splitPrefix takes the key_prefix query parameter out of a Redis URL.
func splitPrefix(raw string) (string, string, error) {
	base, query, ok := strings.Cut(raw, "?")
	if !ok {
		return raw, "", nil
	}
	q, err := neturl.ParseQuery(query)
	if err != nil {
		return "", "", fmt.Errorf("query: %w", err)
	}
	prefix := q.Get("key_prefix")
	q.Del("key_prefix")
	if rest := q.Encode(); rest != "" {
		base += "?" + rest
	}
	return base, prefix, nil
}

// urlError drops the URL (and so any password in it) from a URL parsing error.
func urlError(err error) error {
	var ue *neturl.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// New returns a store on rdb (a *redis.Client, *redis.ClusterClient or the UniversalClient of
// either). It checks that Redis answers and subscribes to the store's notification channel before
// it returns, and warns through opts.Logger when the server's maxmemory-policy would evict jobs
// (see CheckEvictionPolicy). Close does not close rdb.
//
// New adds a hook to rdb that marks a network error of any of its calls, the caller's own
// included, as Redis being unreachable: the message starts "cannot reach Redis", and the
// go-redis error (and the context's, when its deadline cut the call) stays in the chain for
// errors.Is and errors.As.
func New(ctx context.Context, rdb goredis.UniversalClient, opts Options) (*Store, error) {
	prefix := opts.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("redis: key prefix %q contains a brace, which would move the queues' hash tags", prefix)
	}
	addUnreachableHook(rdb)
	if err := rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redis: ping: %w", err)
	}
	s := &Store{rdb: rdb, prefix: prefix, done: make(chan struct{}), sender: tokens(1)[0], noHandoff: opts.NoHandoff,
		logger: opts.Logger, serveWithin: serveWithin, gotTTL: gotTTL}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	s.lost = newClaimRecovery(s)
	s.idsK, s.queuesK = s.idsKey(), s.queuesKey()
	if err := s.CheckEvictionPolicy(ctx); errors.Is(err, ErrEvictionPolicy) {
		s.logger.Warn(err.Error())
	}
	s.waitCtx, s.waitCancel = context.WithCancel(context.Background())
	if err := s.startNotifier(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// logf logs an error of the store's background work.
func (s *Store) logf(format string, args ...any) { s.logger.Error(fmt.Sprintf(format, args...)) }

// Client returns the go-redis client the store uses.
func (s *Store) Client() goredis.UniversalClient { return s.rdb }

// Prefix returns the store's key prefix.
func (s *Store) Prefix() string { return s.prefix }

// Migrate loads the store's function library (its scripts) into the server. Redis has no schema;
// the library is loaded again on demand after a restart or failover, so calling Migrate is
// optional.
func (s *Store) Migrate(ctx context.Context) error {
	if err := loadLibrary(ctx, s.rdb); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	return nil
}

// Close makes a last look for the jobs of claims whose reply was lost (lostclaim.go), stops the
// notification subscription and, for a store made by Open, closes the client.
func (s *Store) Close() error {
	var err error
	s.closed.Do(func() {
		stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s.stopWaiters(stop)
		cancel()
		s.lost.Close()
		s.relayWG.Wait()
		s.cancel()
		err = s.ps.Close()
		<-s.done
		if s.own {
			if cerr := s.rdb.Close(); err == nil {
				err = cerr
			}
		}
	})
	return err
}

// queueTag returns the hash tag of queue: the name itself when it is safe inside braces, else its
// hex form (the "q:" and "h:" prefixes keep the two forms apart).
func queueTag(queue string) string {
	if strings.ContainsAny(queue, "{}") {
		return "h:" + hex.EncodeToString([]byte(queue))
	}
	return "q:" + queue
}

// qkey returns the key prefix of queue's keys (KEYS[1] of the queue scripts).
func (s *Store) qkey(queue string) string { return s.prefix + "{" + queueTag(queue) + "}:" }

// keys returns the KEYS of a queue script: the queue's key prefix, from which the script derives
// its other keys (all in the queue's slot) and the store's prefix (for the global keys of the
// single-node features).
func (s *Store) keys(queue string) []string { return []string{s.qkey(queue)} }

// jobKey returns the key of a job's hash.
func (s *Store) jobKey(queue, id string) string { return s.qkey(queue) + "j:" + id }

// Global keys.
func (s *Store) idsKey() string               { return s.prefix + "ids" }
func (s *Store) queuesKey() string            { return s.prefix + "queues" }
func (s *Store) channel() string              { return s.prefix + "{notify}" }
func (s *Store) leaderKey(name string) string { return s.prefix + "leader:" + name }

// tokens returns n fresh random claim tokens.
func tokens(n int) []string {
	buf := make([]byte, 12*n)
	_, _ = rand.Read(buf)
	out := make([]string, n)
	for i := range out {
		out[i] = hex.EncodeToString(buf[12*i : 12*(i+1)])
	}
	return out
}

// payload is a notification as sent on the channel.
type payload struct {
	Kind        store.NotificationKind `json:"k"`
	Queue       string                 `json:"q,omitempty"`
	JobID       string                 `json:"j,omitempty"`
	ClaimToken  string                 `json:"t,omitempty"`
	DueAt       int64                  `json:"d,omitempty"`
	Nonce       uint32                 `json:"n,omitempty"`
	Client      string                 `json:"c,omitempty"`
	Fingerprint string                 `json:"f,omitempty"`
	Sender      string                 `json:"s,omitempty"`
}

func encodeNotification(n store.Notification, sender string) string {
	p := payload{Kind: n.Kind, Queue: n.Queue, JobID: n.JobID, ClaimToken: n.ClaimToken, Nonce: n.Nonce, Client: n.Client, Fingerprint: n.Fingerprint,
		Sender: sender}
	if !n.DueAt.IsZero() {
		p.DueAt = n.DueAt.UnixMicro()
	}
	b, _ := json.Marshal(p)
	return string(b)
}

// encodeInsert is encodeNotification of an insert announcement due now, written without
// reflection for the common queue name (printable ASCII that JSON writes as is): a producer
// encodes one per insert. Other names go through encodeNotification.
func encodeInsert(queue string, nonce uint32, sender string) string {
	if queue == "" {
		return encodeNotification(store.Notification{Kind: store.NotifyInsert, Nonce: nonce}, sender)
	}
	for i := 0; i < len(queue); i++ {
		if c := queue[i]; c < 0x20 || c > 0x7e || strings.IndexByte(`"\\<>&`, c) >= 0 {
			return encodeNotification(store.Notification{Kind: store.NotifyInsert, Queue: queue, Nonce: nonce}, sender)
		}
	}
	b := make([]byte, 0, 48+len(queue)+len(sender))
	b = append(b, `{"k":"`...)
	b = append(b, store.NotifyInsert...)
	b = append(b, `","q":"`...)
	b = append(b, queue...)
	b = append(b, `","n":`...)
	b = strconv.AppendUint(b, uint64(nonce), 10)
	b = append(b, `,"s":"`...)
	b = append(b, sender...)
	b = append(b, `"}`...)
	return string(b)
}

func decodeNotification(s string) (store.Notification, string, bool) {
	var p payload
	if err := json.Unmarshal([]byte(s), &p); err != nil || p.Kind == "" {
		return store.Notification{}, "", false
	}
	n := store.Notification{Kind: p.Kind, Queue: p.Queue, JobID: p.JobID, ClaimToken: p.ClaimToken, Nonce: p.Nonce, Client: p.Client, Fingerprint: p.Fingerprint}
	if p.DueAt != 0 {
		n.DueAt = time.UnixMicro(p.DueAt).UTC()
	}
	return n, p.Sender, true
}

// The channel is sharded pub/sub (SSUBSCRIBE, SPUBLISH; Redis 7): on a cluster every notification
// goes through the one master that owns the channel's slot, so one publisher's notifications
// arrive in the order they were sent (plain PUBLISH fans out over the cluster bus from whichever
// node got it, and two publishes through two nodes can arrive swapped).

// startNotifier subscribes to the channel and waits for the subscription to be confirmed, so that
// nothing published after New returns is missed.
func (s *Store) startNotifier(ctx context.Context) error {
	ps, err := subscribe(ctx, s.rdb, s.channel())
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	s.ps = ps
	s.subscribed.Store(true)
	rctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.receive(rctx)
	return nil
}

// receive delivers the channel's messages to the hub. go-redis reconnects and subscribes again
// after a lost connection; the confirmation of such a resubscription is delivered as
// NotifyReconnect, since anything published meanwhile was missed.
func (s *Store) receive(ctx context.Context) {
	defer close(s.done)
	receiveNotifications(ctx, s.ps, s.sender, s.notify, &s.subscribed)
}

// notify hands a notification to this store's subscribers. A cancel reaches the hand-off first
// (heardCancel): no subscriber hears of it while the cancelled run still waits there to be taken.
func (s *Store) notify(n store.Notification) {
	if n.Kind == store.NotifyCancel && s.handoffOn() {
		s.heardCancel(n)
	}
	s.hub.Publish(n)
}

// Notifier returns the store's notification channel: Redis pub/sub, reaching every process that
// uses the same Redis and prefix.
func (s *Store) Notifier() store.Notifier { return (*notifier)(s) }

type notifier Store

// Subscribe registers fn for every notification until the returned function is called.
func (n *notifier) Subscribe(fn func(store.Notification)) func() { return n.hub.Subscribe(fn) }

// Signal publishes client signals to every process on the channel.
func (n *notifier) Signal(ctx context.Context, ns []store.Notification) error {
	if err := notifyhub.CheckSignals(ns); err != nil {
		return err
	}
	if err := (*Store)(n).publish(ctx, ns); err != nil {
		return fmt.Errorf("redis: signal: %w", err)
	}
	return nil
}

// publish delivers notifications to this store's own subscribers at once, and sends them on the
// channel, pipelined, to every other store on it (whose echo this store skips).
func (s *Store) publish(ctx context.Context, ns []store.Notification) error {
	if len(ns) == 0 {
		return nil
	}
	for _, n := range ns {
		s.notify(n)
	}
	if len(ns) == 1 {
		return s.rdb.SPublish(ctx, s.channel(), encodeNotification(ns[0], s.sender)).Err()
	}
	_, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for _, n := range ns {
			p.SPublish(ctx, s.channel(), encodeNotification(n, s.sender))
		}
		return nil
	})
	return err
}
