package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
	"github.com/pronto-jobs/pronto/store/postgres"
	redisstore "github.com/pronto-jobs/pronto/store/redis"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// connectTimeout bounds how long a command waits for PostgreSQL before saying it is unreachable,
// unless the URL sets connect_timeout itself.
const connectTimeout = 5 * time.Second

// Database kinds.
const (
	kindPostgres = "postgres"
	kindSQLite   = "sqlite"
	kindMemory   = "memory"
	kindRedis    = "redis"
)

// target is a parsed --database-url.
type target struct {
	kind    string
	display string // for messages: the URL with any password hidden
	path    string // sqlite: the file
	name    string // memory: the shared store's name, "" for a private one
	pg      *pgxpool.Config
	url     string // redis: the URL as given
}

// parseDatabaseURL parses a --database-url. Every error is a usage error naming the accepted forms.
func parseDatabaseURL(raw string) (*target, error) {
	const forms = "use postgres://user:pass@host:5432/db, redis://host:6379/0, sqlite:PATH or memory:"
	lower := strings.ToLower(raw)
	switch {
	case strings.HasPrefix(lower, "postgres://"), strings.HasPrefix(lower, "postgresql://"):
		scheme, rest, _ := strings.Cut(raw, "://")
		raw = strings.ToLower(scheme) + "://" + rest // pgx wants the scheme in lowercase
		display := redactAny(raw)
		cfg, err := pgxpool.ParseConfig(raw)
		if err != nil {
			return nil, usageErrorf("invalid PostgreSQL URL: %s", scrub(err.Error(), raw))
		}
		return &target{kind: kindPostgres, display: display, pg: cfg}, nil
	case strings.HasPrefix(lower, "sqlite:"):
		path := raw[len("sqlite:"):]
		// sqlite:///abs/path.db and sqlite://rel.db are accepted too.
		path = strings.TrimPrefix(path, "//")
		if path == "" {
			return nil, usageErrorf("database URL %q names no file: use sqlite:PATH, for example sqlite:pronto.db", raw)
		}
		if path == ":memory:" {
			return nil, usageErrorf("database URL %q: an in-memory SQLite database does not outlive one command; use memory:", raw)
		}
		return &target{kind: kindSQLite, display: "sqlite:" + path, path: path}, nil
	case strings.HasPrefix(lower, "redis://"), strings.HasPrefix(lower, "rediss://"):
		if err := redisstore.CheckURL(raw); err != nil {
			return nil, usageErrorf("invalid Redis URL %s: %v", redactAny(raw), err)
		}
		return &target{kind: kindRedis, display: redactAny(raw), url: raw}, nil
	case strings.HasPrefix(lower, "memory:"):
		return &target{kind: kindMemory, display: raw, name: raw[len("memory:"):]}, nil
	case raw == "":
		return nil, usageErrorf("empty database URL: %s", forms)
	}
	// The scheme is named only when there is one: a DSN ("host=db password=...") is not repeated.
	if scheme, _, ok := strings.Cut(raw, ":"); ok && validScheme(scheme) {
		return nil, usageErrorf("unsupported database URL %q (scheme %q): %s", redactAny(raw), scheme, forms)
	}
	return nil, usageErrorf("unsupported database URL %q (not a URL): %s", redactAny(raw), forms)
}

// redactAny hides the passwords of a URL of any scheme, even one that does not parse: the one in
// "user:pass@", and the value of every query parameter whose name contains "password" (pgx reads
// ?password= and ?sslpassword=). A key=value DSN ("host=db password=secret") has its password=
// values hidden too.
func redactAny(raw string) string {
	if !strings.Contains(raw, "://") {
		return dsnPassword.ReplaceAllString(raw, "${1}xxxxx")
	}
	base, query, hasQuery := strings.Cut(raw, "?")
	out := redactUserinfo(base)
	if hasQuery {
		parts := strings.Split(query, "&")
		for i, p := range parts {
			if k, _, ok := strings.Cut(p, "="); ok && isPasswordKey(k) {
				parts[i] = k + "=xxxxx"
			}
		}
		out += "?" + strings.Join(parts, "&")
	}
	return out
}

// dsnPassword matches the value of a password in a key=value DSN, quoted ('pass word', with \'
// escapes) or not.
var dsnPassword = regexp.MustCompile(`(?i)(\b[a-z]*password\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s]*)`)

// isPasswordKey reports whether a query parameter's name (escaped or not) names a password.
func isPasswordKey(k string) bool {
	if u, err := url.QueryUnescape(k); err == nil {
		k = u
	}
	return strings.Contains(strings.ToLower(k), "password")
}

// redactUserinfo hides the password of "user:pass@" in a URL without its query.
func redactUserinfo(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		if _, ok := u.User.Password(); ok {
			return u.Redacted()
		}
		return raw
	}
	// Unparsable: hide whatever lies between "user:" and the last "@" of the authority.
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	auth, path, _ := strings.Cut(rest, "/")
	at := strings.LastIndex(auth, "@")
	if at < 0 {
		return raw
	}
	user, _, hasPass := strings.Cut(auth[:at], ":")
	if !hasPass {
		return raw
	}
	out := scheme + "://" + user + ":xxxxx" + auth[at:]
	if path != "" || strings.Contains(rest, "/") {
		out += "/" + path
	}
	return out
}

// secretsOf returns the passwords written in raw (a URL or a DSN), as written and unescaped, for
// scrubbing them from messages that quote raw in their own way (pgx's parse errors).
func secretsOf(raw string) []string {
	var out []string
	add := func(s string) {
		if s != "" && s != "xxxxx" {
			out = append(out, s)
			if u, err := url.QueryUnescape(s); err == nil && u != s {
				out = append(out, u)
			}
		}
	}
	if !strings.Contains(raw, "://") {
		for _, m := range dsnPassword.FindAllStringSubmatch(raw, -1) {
			add(strings.Trim(m[2], "'"))
		}
		return out
	}
	base, query, _ := strings.Cut(raw, "?")
	if _, rest, ok := strings.Cut(base, "://"); ok {
		auth, _, _ := strings.Cut(rest, "/")
		if at := strings.LastIndex(auth, "@"); at >= 0 {
			if _, pass, ok := strings.Cut(auth[:at], ":"); ok {
				add(pass)
			}
		}
	}
	for _, p := range strings.Split(query, "&") {
		if k, v, ok := strings.Cut(p, "="); ok && isPasswordKey(k) {
			add(v)
		}
	}
	return out
}

// scrub hides in msg every password written in raw.
func scrub(msg, raw string) string {
	for _, s := range secretsOf(raw) {
		msg = strings.ReplaceAll(msg, s, "xxxxx")
	}
	return msg
}

// validScheme reports whether s is a URL scheme (RFC 3986: a letter, then letters, digits, +, - or .).
func validScheme(s string) bool {
	if s == "" || !(s[0] >= 'a' && s[0] <= 'z' || s[0] >= 'A' && s[0] <= 'Z') {
		return false
	}
	return strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.')
	}) < 0
}

// database is an open store and what is needed to close it.
type database struct {
	t     *target
	store store.Store
	close func()
	// flags repeats the database flags the user gave, for suggested commands.
	flags string
}

// Close releases the store and everything opened for it.
func (d *database) Close() {
	if d.close != nil {
		d.close()
	}
}

// openOptions says how a command uses its database.
type openOptions struct {
	// migrate applies pending migrations (demo). Otherwise a missing or outdated schema is an error
	// that tells the user to run 'pronto migrate up', unless noSchemaCheck.
	migrate bool
	// noSchemaCheck skips the schema check (the migrate commands).
	noSchemaCheck bool
	// create allows creating a missing SQLite file (migrate up, demo).
	create bool
	// maxConns sizes the PostgreSQL pool (default 4).
	maxConns int32
	// checkListen connects once to --database-listen-url, if given, and fails when it cannot (the
	// commands that run workers: serve, demo).
	checkListen bool
}

// databaseURL returns the URL to use: the flag (even an empty one, which parseDatabaseURL refuses),
// else the environment, else the default.
func (r *runner) databaseURL() string {
	if r.dbURLSet {
		return r.dbURL
	}
	if u := r.env.getenv(EnvDatabaseURL); u != "" {
		return u
	}
	return DefaultDatabaseURL
}

// open opens the database the flags name.
func (r *runner) open(ctx context.Context, o openOptions) (*database, error) {
	t, err := r.parseTarget(r.databaseURL())
	if err != nil {
		return nil, err
	}
	return r.openTarget(ctx, t, o)
}

// parseTarget is parseDatabaseURL, refusing a named in-memory store unless Env.SharedMemory: in a
// process that runs one command, "memory:NAME" would look like a store that outlives the command.
func (r *runner) parseTarget(raw string) (*target, error) {
	t, err := parseDatabaseURL(raw)
	if err != nil {
		return nil, err
	}
	if t.kind == kindMemory && t.name != "" && !r.env.SharedMemory {
		return nil, usageErrorf("database URL %q: an in-memory store is written memory: alone (it lasts one command)", raw)
	}
	return t, nil
}

func (r *runner) openTarget(ctx context.Context, t *target, o openOptions) (*database, error) {
	if r.schemaSet && t.kind != kindPostgres {
		return nil, usageErrorf("--schema applies to PostgreSQL only, and the database is %s", t.display)
	}
	if r.listenURL != "" && t.kind != kindPostgres {
		return nil, usageErrorf("--database-listen-url applies to PostgreSQL only, and the database is %s", t.display)
	}
	var flags string
	switch {
	case !r.dbURLSet:
	case t.display != r.dbURL:
		flags = " --database-url URL" // the user's URL holds a password that is not repeated
	default:
		flags = " --database-url " + shellQuote(t.display)
	}
	if r.schemaSet {
		flags += " --schema " + shellQuote(r.schema)
	}
	var (
		db  *database
		err error
	)
	switch t.kind {
	case kindPostgres:
		db, err = r.openPostgres(ctx, t, o)
	case kindSQLite:
		db, err = openSQLite(ctx, t, o, flags)
	case kindRedis:
		db, err = r.openRedis(ctx, t)
	default:
		db = openMemory(t)
	}
	if err != nil {
		return nil, err
	}
	db.flags = flags
	if o.migrate {
		if err := db.store.Migrate(ctx); err != nil {
			db.Close()
			return nil, errorf("migrating %s: %s%v", t.display, conditionHint(db.store, err), err)
		}
	} else if !o.noSchemaCheck {
		if err := checkSchema(ctx, db); err != nil {
			db.Close()
			return nil, err
		}
	}
	return db, nil
}

func (r *runner) openPostgres(ctx context.Context, t *target, o openOptions) (*database, error) {
	cfg := t.pg.Copy()
	listenURL, err := r.pgListenURL(cfg, t)
	if err != nil {
		return nil, err
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	cfg.MaxConns = 4
	if o.maxConns > 0 {
		cfg.MaxConns = o.maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, errorf("cannot connect to PostgreSQL at %s: %s", t.display, scrub(err.Error(), r.databaseURL()))
	}
	// The pool connects lazily: check the schema name before waiting for the server.
	st, err := postgres.New(pool, postgres.Config{Schema: r.schema, ListenURL: listenURL})
	if err != nil {
		pool.Close()
		return nil, usageErrorf("--schema %q: %v", r.schema, err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, cfg.ConnConfig.ConnectTimeout+time.Second)
	err = pool.Ping(pingCtx)
	cancel()
	if err != nil {
		_ = st.Close()
		pool.Close()
		return nil, errorf("cannot connect to PostgreSQL at %s: %s", t.display, scrub(connectErrorText(err, cfg.ConnConfig.ConnectTimeout), r.databaseURL()))
	}
	if listenURL != "" && o.checkListen {
		if err := checkListenURL(ctx, listenURL); err != nil {
			_ = st.Close()
			pool.Close()
			return nil, err
		}
	}
	return &database{t: t, store: st, close: func() { _ = st.Close(); pool.Close() }}, nil
}

// checkListenURL connects once to the listener's URL: a client that runs for long (serve, demo)
// would otherwise start with workers that are never woken by notifications, polling only, while its
// listener retries in the background.
func checkListenURL(ctx context.Context, raw string) error {
	display := redactAny(raw)
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		return usageErrorf("--database-listen-url: invalid PostgreSQL URL: %s", scrub(err.Error(), raw))
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = connectTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout+time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		return errorf("cannot connect to PostgreSQL at %s (--database-listen-url, the notification listener's): %s",
			display, scrub(connectErrorText(err, cfg.ConnectTimeout), raw))
	}
	return conn.Close(context.WithoutCancel(ctx))
}

// pgListenURL returns the listener's URL: --database-listen-url, else $PRONTO_DATABASE_LISTEN_URL,
// else "" (listen where the pool connects). With one, the pool goes through a transaction pooler,
// so unless the URL chose a query mode itself, cfg is switched to pgx's cache_describe mode: no
// named prepared statements, which a pooler would hand from one client's session to another's
// (docs/pgbouncer.md).
func (r *runner) pgListenURL(cfg *pgxpool.Config, t *target) (string, error) {
	raw := r.listenURL
	if raw == "" {
		raw = r.env.getenv(EnvDatabaseListenURL)
	}
	if raw == "" {
		return "", nil
	}
	// Checked before parsing: the listener takes a PostgreSQL URL only, so the other forms a
	// --database-url may take are not offered.
	if lower := strings.ToLower(raw); !strings.HasPrefix(lower, "postgres://") && !strings.HasPrefix(lower, "postgresql://") {
		return "", usageErrorf("--database-listen-url %q: must be a postgres:// URL, for example postgres://user:pass@host:5432/db", redactAny(raw))
	}
	if _, err := parseDatabaseURL(raw); err != nil {
		return "", usageErrorf("--database-listen-url: %v", err)
	}
	if !strings.Contains(t.display, "default_query_exec_mode") {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
	scheme, rest, _ := strings.Cut(raw, "://")
	return strings.ToLower(scheme) + "://" + rest, nil // pgx wants the scheme in lowercase
}

// conditionHint names, before a store's error, the condition of a database that answered but could
// not serve ("database busy: lock timeout (...): "), or "" for any other error: the driver's text
// ("canceling statement due to lock timeout (SQLSTATE 55P03)") does not say that another session,
// such as a migration, holds the lock, nor that a read-only server may be a demoted primary.
func conditionHint(st store.Store, err error) string {
	switch c := store.ConditionOf(st, err); c {
	case store.ConditionLockTimeout, store.ConditionStatementTimeout, store.ConditionReadOnly,
		store.ConditionInsufficientResources, store.ConditionIdleSessionTimeout, store.ConditionBusy,
		store.ConditionLoading, store.ConditionBusyScript, store.ConditionMasterDown, store.ConditionClusterDown:
		return c.Message() + ": "
	}
	return ""
}

// connectErrorText shortens pgx's connection errors (which list every address and TLS mode tried,
// one a line) to one line the user can act on.
func connectErrorText(err error, timeout time.Duration) string {
	var (
		pgErr  *pgconn.PgError
		dnsErr *net.DNSError
		opErr  *net.OpError
	)
	switch {
	case errors.As(err, &pgErr):
		return fmt.Sprintf("the server refused: %s%s (%s)", conditionHint(nil, err), pgErr.Message, pgErr.Code)
	case errors.As(err, &dnsErr):
		return fmt.Sprintf("unknown host %q", dnsErr.Name)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("no answer within %s (is the server running and reachable?)", timeout)
	case errors.As(err, &opErr):
		return opErr.Error()
	}
	// Anything else: one line, without repeats.
	var parts []string
	seen := map[string]bool{}
	for _, l := range strings.Split(err.Error(), "\n") {
		if l = strings.TrimSpace(l); l != "" && !seen[l] {
			seen[l] = true
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " ")
}

func openSQLite(ctx context.Context, t *target, o openOptions, flags string) (*database, error) {
	dir := filepath.Dir(t.path)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, errorf("cannot open %s: directory %q does not exist", t.display, dir)
	}
	fi, err := os.Stat(t.path)
	switch {
	case err == nil && fi.IsDir():
		return nil, errorf("cannot open %s: %q is a directory", t.display, t.path)
	case errors.Is(err, os.ErrNotExist) && !o.create:
		return nil, errorf("no database at %s; create it with: pronto migrate up%s", t.path, flags)
	}
	st, err := sqlite.Open(ctx, t.path)
	if err != nil {
		return nil, errorf("cannot open %s: %v", t.display, err)
	}
	return &database{t: t, store: st, close: func() { _ = st.Close() }}, nil
}

// quietRedisLog drops go-redis's own log lines (dial retries): the command reports the error.
type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

// openRedis connects to the Redis the URL names (waiting at most connectTimeout for it). A server
// whose maxmemory-policy would evict jobs gets a warning on stderr from every command, as the data
// it would lose is every command's business; a server that will not say its policy is not judged.
func (r *runner) openRedis(ctx context.Context, t *target) (*database, error) {
	goredis.SetLogger(quietRedisLog{})
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	st, err := redisstore.Open(cctx, t.url, redisstore.Options{})
	if err != nil {
		return nil, errorf("%s", redisConnectError(t.display, t.url, err))
	}
	if err := st.CheckEvictionPolicy(cctx); errors.Is(err, redisstore.ErrEvictionPolicy) {
		fmt.Fprintf(r.env.Stderr, "pronto: warning: %v\n", err)
	}
	return &database{t: t, store: st, close: func() { _ = st.Close() }}, nil
}

// redisConnectError says why the Redis at url (display, for messages) could not be used. A database
// index the server does not have is a mistake in the URL, not a server out of reach: it is named so.
func redisConnectError(display, url string, err error) string {
	var re goredis.Error
	if errors.As(err, &re) && strings.Contains(re.Error(), "DB index is out of range") {
		return fmt.Sprintf("Redis at %s: the DB index in the URL is out of range: the server has databases 0 to 15 unless its databases setting says otherwise", display)
	}
	return fmt.Sprintf("cannot connect to Redis at %s: %s", display, redisErrorText(url, err))
}

// redisErrorText is a connection error to the Redis at url. A TLS handshake with a server that does
// not speak TLS waits for an answer that never comes: only the timeout is reported, so the likely
// cause is named.
func redisErrorText(url string, err error) string {
	msg := scrub(err.Error(), url)
	if strings.HasPrefix(strings.ToLower(url), "rediss://") && (errors.Is(err, context.DeadlineExceeded) || strings.Contains(msg, "deadline exceeded") || strings.Contains(msg, "i/o timeout")) {
		msg += " (rediss:// speaks TLS: is TLS enabled on the server? For a plain-text server use redis://)"
	}
	return msg
}

// Named in-memory stores live as long as the process, so that commands run in-process (by tests, or
// by a program embedding the CLI) share them: "memory:NAME". A bare "memory:" is private to one command.
var memoryStores struct {
	sync.Mutex
	m map[string]*memory.Store
}

func openMemory(t *target) *database {
	if t.name == "" {
		st := memory.New()
		return &database{t: t, store: st, close: func() { _ = st.Close() }}
	}
	memoryStores.Lock()
	defer memoryStores.Unlock()
	if memoryStores.m == nil {
		memoryStores.m = make(map[string]*memory.Store)
	}
	st := memoryStores.m[t.name]
	if st == nil {
		st = memory.New()
		memoryStores.m[t.name] = st
	}
	return &database{t: t, store: st}
}

// checkSchema refuses a database whose pronto schema is missing, behind or ahead of this binary,
// telling the user what to run.
func checkSchema(ctx context.Context, db *database) error {
	c, ok := db.store.(store.SchemaChecker)
	if !ok {
		return nil
	}
	err := c.CheckSchema(ctx)
	var se *store.SchemaError
	switch {
	case err == nil:
		return nil
	case !errors.As(err, &se):
		return errorf("cannot read the schema of %s: %s%v", db.t.display, conditionHint(db.store, err), err)
	case len(se.Unknown) > 0:
		return newerSchemaError(db, se)
	case len(se.Missing) == se.Known:
		return errorf("%s has no pronto schema yet; create it with: pronto migrate up%s", db.t.display, db.urlFlag())
	default:
		names := make([]string, len(se.Missing))
		for i, m := range se.Missing {
			names[i] = fmt.Sprintf("%03d_%s", m.Version, m.Name)
		}
		return errorf("the pronto schema of %s is out of date (%d of %d migrations pending: %s); upgrade it with: pronto migrate up%s",
			db.t.display, len(se.Missing), se.Known, strings.Join(names, ", "), db.urlFlag())
	}
}

// newerSchemaError says that db's schema has migrations applied that this binary does not know,
// naming the PostgreSQL schema too (each schema of a database is a pronto of its own), and the
// command that reverts them: the newer binary's, the only one that knows how.
func newerSchemaError(db *database, se *store.SchemaError) error {
	where := db.t.display
	if s, ok := db.store.(interface{ Schema() string }); ok {
		where = fmt.Sprintf("%s (schema %s)", where, s.Schema())
	}
	versions := make([]string, len(se.Unknown))
	for i, v := range se.Unknown {
		versions[i] = fmt.Sprintf("%03d", v)
	}
	return errorf("the pronto schema of %s is newer than this binary: it has migration(s) %s applied, which this version "+
		"of pronto does not know; upgrade pronto, or roll them back with the newer pronto: pronto migrate down --steps %d%s",
		where, strings.Join(versions, ", "), len(se.Unknown), db.urlFlag())
}

// urlFlag is the " --database-url ... --schema ..." to repeat in a suggested command: empty when the
// database came from the environment or the default.
func (d *database) urlFlag() string { return d.flags }

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@%+=,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
