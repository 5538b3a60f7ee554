// Package postgres is pronto's production store: PostgreSQL through pgx v5.
//
// Jobs are claimed with one FOR UPDATE SKIP LOCKED statement per batch, completed with one statement
// per batch, inserted in one round trip (a single job) or through COPY (a large batch), and announced
// through LISTEN/NOTIFY so a producer claims a job a millisecond or two after its insert commits.
//
// Unique jobs, rate limits and workflows (store/features.go) are enforced by the database itself,
// so they hold across every process that shares it:
//
//   - A partial unique index over held keys (jobs_unique_idx) decides unique inserts, which run
//     INSERT ... ON CONFLICT per unique job in the insert's transaction. Batches without unique
//     jobs keep the pipelined and COPY paths.
//   - The plain claim leaves jobs with a rate key alone; when a queue has some, Claim runs the
//     claim_limited function, which locks the keys' limits so concurrent claims never overspend
//     them. Queues without such jobs pay one probe of an empty index, in the claim's round trip.
//   - A row trigger on jobs decides a workflow job's waiting children in the transaction that
//     makes it terminal, whatever path did, and announces the queues of the children it releases.
//
// Every object lives in one schema (Config.Schema, "pronto" by default), so several applications can
// share a database, each in a schema of its own, with separate notification channels. Migrate
// creates the schema and applies the embedded migrations; it is safe to call from every process at
// start-up.
//
// Behind PgBouncer in transaction-pooling mode, the pool goes through the pooler in pgx's
// cache_describe query mode and Config.ListenURL reaches PostgreSQL directly for the listener
// (docs/pgbouncer.md): nothing else the store does needs a session.
//
//	pool, _ := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	st, err := postgres.New(pool, postgres.Config{})
//	if err != nil { ... }
//	defer st.Close()
//	if err := st.Migrate(ctx); err != nil { ... }
package postgres

import (
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pronto-jobs/pronto/internal/lostclaim"
	"github.com/pronto-jobs/pronto/store"
)

// DefaultSchema is the schema used when Config.Schema is empty.
const DefaultSchema = "pronto"

// Config configures a Store.
type Config struct {
	// Schema holds every table of the store and names its notification channel. It must be a plain
	// lowercase identifier: a letter or underscore, then letters, digits or underscores, at most 63
	// bytes. Empty means DefaultSchema.
	Schema string
	// Logger receives the notifier's connection problems. Nil discards them.
	Logger *slog.Logger
	// ListenURL, when set, is where the notification listener connects, instead of where the pool
	// does. Behind PgBouncer in transaction-pooling mode (see docs/pgbouncer.md) the pool goes
	// through the pooler and ListenURL reaches PostgreSQL directly: LISTEN holds a session, which a
	// transaction pooler hands to another client after every statement. Only one connection per
	// store uses it.
	ListenURL string
	// NoHandoff turns the hand-off off (see handoff.go and docs/architecture.md, "Pickup"): every
	// pickup is then a notification followed by the producer's own claim.
	NoHandoff bool
}

// Store is the PostgreSQL implementation of store.Store. It also implements store.Migrator,
// store.PgxTxInserter, store.CronStore, store.RateLimiter and store.Workflows. Its methods are safe
// for concurrent use.
type Store struct {
	pool    *pgxpool.Pool
	schema  string
	channel string
	q       *queries
	log     *slog.Logger
	// jobsTable is the schema-qualified jobs table, for COPY.
	jobsTable pgx.Identifier
	// expand substitutes the schema and channel into migration files, as into statements.
	expand *strings.Replacer
	// listenConfig is the listener's connection (Config.ListenURL), nil to connect as the pool does.
	listenConfig *pgx.ConnConfig

	notifier *notifier
	// handoff is the store's side of the hand-off; nil when Config.NoHandoff.
	handoff *handoff

	// lost returns the jobs of claims whose reply was lost (lostclaim.go).
	lost *lostclaim.Recovery[lostClaim]

	// fairQueues holds the queues whose last claim went fair (queue name -> struct{}): their next
	// claim goes to claim_fair_pick in one round trip, not through the plain claim first.
	fairQueues sync.Map
}

// Compile-time checks of the interfaces the store promises.
var (
	_ store.Store         = (*Store)(nil)
	_ store.Migrator      = (*Store)(nil)
	_ store.SchemaChecker = (*Store)(nil)
	_ store.PgxTxInserter = (*Store)(nil)
	_ store.Notifier      = (*notifier)(nil)
	_ pgx.CopyFromSource  = (*copySource)(nil)
)

const (
	maxIdentifierLength    = 63
	channelPrefix          = "pronto_"
	migrationLockNamespace = "pronto-migrate:"
)

var (
	errNilPool    = errors.New("postgres store: nil pool")
	discardLogger = slog.New(slog.DiscardHandler)
)

// New returns a store on pool, whose objects live in cfg.Schema. It does not touch the database:
// call Migrate before use. Close stops what the store started, never pool itself.
func New(pool *pgxpool.Pool, cfg Config) (*Store, error) {
	if pool == nil {
		return nil, errNilPool
	}
	schema := cfg.Schema
	if schema == "" {
		schema = DefaultSchema
	}
	if err := validateIdentifier(schema); err != nil {
		return nil, fmt.Errorf("postgres store: schema: %w", err)
	}
	var listenConfig *pgx.ConnConfig
	if cfg.ListenURL != "" {
		var err error
		if listenConfig, err = pgx.ParseConfig(cfg.ListenURL); err != nil {
			return nil, fmt.Errorf("postgres store: ListenURL: %w", err)
		}
	}
	logger := cfg.Logger
	if logger == nil {
		logger = discardLogger
	}
	channel := channelName(schema)
	expand := strings.NewReplacer("{schema}", pgx.Identifier{schema}.Sanitize(), "{channel}", quoteLiteral(channel))
	s := &Store{
		pool:    pool,
		schema:  schema,
		channel: channel,
		q:       newQueries(expand),
		log:     logger,

		jobsTable:    pgx.Identifier{schema, "jobs"},
		expand:       expand,
		listenConfig: listenConfig,
	}
	s.notifier = newNotifier(s)
	s.lost = newClaimRecovery(s)
	if !cfg.NoHandoff {
		s.handoff = newHandoff(s)
	}
	return s, nil
}

// Pool returns the pool the store was built on.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Schema returns the schema that holds the store's tables.
func (s *Store) Schema() string { return s.schema }

// Channel returns the LISTEN/NOTIFY channel on which the store announces inserts, cancellations and
// pauses. It is derived from the schema, so stores in different schemas never hear each other.
func (s *Store) Channel() string { return s.channel }

// Close makes a last look for the jobs of claims whose reply was lost (lostclaim.go), withdraws
// the store's hand-off advertisements, returns the jobs handed to it and not taken, and stops the
// notifier's listener connection and waits for it to exit. It does not close the
// pool. The store must not be used afterwards.
func (s *Store) Close() error {
	s.lost.Close()
	s.handoff.close()
	s.notifier.close()
	return nil
}

// validateIdentifier accepts the identifiers that need no quoting and fold to themselves, so the
// schema name means the same quoted or not, in SQL and in channel names alike.
func validateIdentifier(name string) error {
	if len(name) > maxIdentifierLength {
		return fmt.Errorf("%q is longer than %d bytes", name, maxIdentifierLength)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c == '_':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return fmt.Errorf("%q is not a plain lowercase identifier (a-z, 0-9 and _, not starting with a digit)", name)
		}
	}
	return nil
}

// channelName derives the notification channel from the schema: "pronto_<schema>", shortened with
// a hash when that exceeds PostgreSQL's 63-byte identifier limit (longer channel names would be
// truncated by the server, and two long schemas could then share a channel).
func channelName(schema string) string {
	name := channelPrefix + schema
	if len(name) <= maxIdentifierLength {
		return name
	}
	h := fnv.New64a()
	h.Write([]byte(schema))
	suffix := fmt.Sprintf("_%016x", h.Sum64())
	return name[:maxIdentifierLength-len(suffix)] + suffix
}

// migrationLockKey is the advisory lock key that serializes migrations of one schema.
func migrationLockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte(migrationLockNamespace))
	h.Write([]byte(schema))
	return int64(h.Sum64())
}

// quoteLiteral quotes s as an SQL string literal (used for names validated beforehand).
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
