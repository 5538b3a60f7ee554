package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// migrator is what the migrate commands need of a store with a versioned schema.
type migrator interface {
	store.Migrator
	store.ReportingMigrator
}

// withMigrations opens the database for a migrate command, reads its migrations and how many are
// applied, and runs fn with them. For a store without a schema it says so and runs nothing.
func (r *runner) withMigrations(ctx context.Context, create bool,
	fn func(m migrator, db *database, ms []store.Migration, applied int) error) error {
	db, err := r.open(ctx, openOptions{noSchemaCheck: true, create: create})
	if err != nil {
		return err
	}
	defer db.Close()
	m, ok := db.store.(migrator)
	if !ok {
		fmt.Fprintf(r.env.Stdout, "%s has no schema: nothing to migrate\n", db.t.display)
		return nil
	}
	ms, applied, err := migrationStatus(ctx, m, db)
	if err != nil {
		return err
	}
	return fn(m, db, ms, applied)
}

// migrateName names db in the migrate commands' reports: its URL, and the PostgreSQL schema when
// --schema chose one, since each schema of a database holds a pronto of its own.
func (r *runner) migrateName(db *database) string {
	if s, ok := db.store.(interface{ Schema() string }); ok && r.schemaSet {
		return fmt.Sprintf("%s (schema %s)", db.t.display, s.Schema())
	}
	return db.t.display
}

// refuseNewer returns an error when db's schema has migrations applied that this binary does not
// know (a newer pronto's): applying or reverting this binary's migrations under them could break
// them, and its status would be misleading.
func refuseNewer(ctx context.Context, db *database) error {
	c, ok := db.store.(store.SchemaChecker)
	if !ok {
		return nil
	}
	var se *store.SchemaError
	if err := c.CheckSchema(ctx); errors.As(err, &se) && len(se.Unknown) > 0 {
		return newerSchemaError(db, se)
	}
	return nil
}

// newerMigrations is implemented by the stores that read the marks newer pronto versions record
// with their migrations (PostgreSQL, SQLite).
type newerMigrations interface {
	NewerMigrations(ctx context.Context) (compatible, incompatible []store.Migration, err error)
}

// newerNote says which migrations a newer pronto applied that this binary runs with (marked
// compatible with older binaries), or "" when none.
func newerNote(ctx context.Context, db *database) string {
	n, ok := db.store.(newerMigrations)
	if !ok {
		return ""
	}
	compatible, _, err := n.NewerMigrations(ctx)
	if err != nil || len(compatible) == 0 {
		return ""
	}
	versions := make([]string, len(compatible))
	for i, m := range compatible {
		versions[i] = fmt.Sprintf("%03d_%s", m.Version, m.Name)
	}
	return fmt.Sprintf("it also has migration(s) %s applied by a newer pronto, marked compatible with older binaries: "+
		"this binary runs on it, but rolls nothing back under them", strings.Join(versions, ", "))
}

// status returns the migrations and how many are applied.
func migrationStatus(ctx context.Context, m migrator, db *database) ([]store.Migration, int, error) {
	ms, err := m.MigrationStatus(ctx)
	if err != nil {
		return nil, 0, errorf("reading the migrations of %s: %v", db.t.display, err)
	}
	applied := 0
	for _, mg := range ms {
		if mg.Applied {
			applied++
		}
	}
	return ms, applied, nil
}

func cmdMigrateUp(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto migrate up [--unlogged | --logged] [flags]",
		"Apply every pending migration, creating the schema (and, for SQLite, the file) if needed.\n"+
			"Safe to run again, and from several processes at once: each prints only the migrations it\n"+
			"applied itself.\n\n"+
			"On PostgreSQL, --unlogged then makes the jobs table UNLOGGED: no WAL for job rows, so jobs\n"+
			"cost less to insert and work, but a database crash (not a clean restart) deletes every job,\n"+
			"and replicas do not have them. --logged makes it durable again. Either rewrites the table\n"+
			"under an exclusive lock (docs/architecture.md, \"An UNLOGGED jobs table\").\n\n"+
			"It refuses to apply a migration marked incompatible with older binaries while clients use the\n"+
			"schema (a live leader lease, or on PostgreSQL a presence announcement heard within 1.5 s):\n"+
			"stop the older release's processes first, or pass --force (docs/upgrading.md).").withDatabase()
	force := fs.Bool("force", false, "apply migrations marked incompatible with older binaries even while clients use the schema")
	unlogged := fs.Bool("unlogged", false, "PostgreSQL: make the jobs table UNLOGGED (jobs are lost on a database crash)")
	logged := fs.Bool("logged", false, "PostgreSQL: make the jobs table logged (durable) again")
	if _, err := fs.parse(args, 0, 0); err != nil {
		return err
	}
	if *unlogged && *logged {
		return usageErrorf("migrate up: --unlogged and --logged exclude each other")
	}
	if *unlogged || *logged {
		// Refused before anything is created or migrated: the flag does not fit the database.
		t, err := r.parseTarget(r.databaseURL())
		if err != nil {
			return err
		}
		if t.kind != kindPostgres {
			return usageErrorf("migrate up: --unlogged and --logged apply to PostgreSQL only, and the database is %s", t.display)
		}
	}
	return r.withMigrations(ctx, true, func(m migrator, db *database, ms []store.Migration, applied int) error {
		if err := refuseNewer(ctx, db); err != nil {
			return err
		}
		if err := r.guardIncompatible(ctx, db, ms, applied, *force); err != nil {
			return err
		}
		// Only what this run applied is reported: another run at once may have applied the rest.
		done, err := m.ApplyMigrations(ctx)
		if err != nil {
			return errorf("migrating %s: %v", db.t.display, err)
		}
		if *unlogged || *logged {
			u, ok := db.store.(persistenceSetter)
			if !ok {
				return errorf("%s: --unlogged and --logged apply to PostgreSQL only", db.t.display)
			}
			if err := u.SetUnlogged(ctx, *unlogged); err != nil {
				return errorf("%s: %v", db.t.display, err)
			}
		}
		ms, after, err := migrationStatus(ctx, m, db)
		if err != nil {
			return err
		}
		for _, mg := range done {
			fmt.Fprintf(r.env.Stdout, "applied %03d_%s\n", mg.Version, mg.Name)
		}
		fmt.Fprintf(r.env.Stdout, "%s is up to date: %d of %d migrations applied\n", r.migrateName(db), after, len(ms))
		if note := newerNote(ctx, db); note != "" {
			fmt.Fprintln(r.env.Stdout, note)
		}
		if *unlogged {
			fmt.Fprintln(r.env.Stdout, "the jobs table is UNLOGGED: a database crash deletes every job")
		} else if *logged {
			fmt.Fprintln(r.env.Stdout, "the jobs table is logged")
		}
		return nil
	})
}

func cmdMigrateDown(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto migrate down [--steps N | --all] [--force] [flags]",
		"Roll back the latest applied migrations, newest first. Rolling back the first migration drops\n"+
			"the jobs table and every job in it.\n\n"+
			"It refuses, naming what it found, when the rollback would delete data (rows of the tables it\n"+
			"drops, values of the columns it drops) or while clients use the schema (a live leader lease,\n"+
			"or on PostgreSQL a client's presence announcement heard within 1.5 s); --force\n"+
			"rolls back anyway. The check runs under the migration lock, on the migrations it then\n"+
			"reverts: rollbacks run at once take turns, each checking what is left.").withDatabase()
	steps := fs.Int("steps", 1, "roll back `N` migrations")
	all := fs.Bool("all", false, "roll back every migration (drops every job)")
	force := fs.Bool("force", false, "roll back even if it deletes data or clients are live")
	if _, err := fs.parse(args, 0, 0); err != nil {
		return err
	}
	if *steps < 1 {
		return usageErrorf("migrate down: --steps %d: must be at least 1", *steps)
	}
	if *all && fs.given("steps") {
		return usageErrorf("migrate down: --steps and --all exclude each other")
	}
	return r.withMigrations(ctx, false, func(m migrator, db *database, ms []store.Migration, applied int) error {
		if applied == 0 {
			fmt.Fprintf(r.env.Stdout, "%s has no migrations applied: nothing to roll back\n", r.migrateName(db))
			return nil
		}
		if err := refuseNewer(ctx, db); err != nil {
			return err
		}
		n := *steps
		if *all {
			n = len(ms)
		}
		// The guard runs under the migration lock, on the very migrations about to be reverted:
		// checked before taking it, a rollback run at the same time could change which these are.
		var guard func(context.Context, []store.Migration) error
		var guardErr error
		if p, ok := m.(store.DownPlanner); ok {
			guard = func(ctx context.Context, revert []store.Migration) error {
				guardErr = r.guardDown(ctx, p, db, len(revert), *force)
				return guardErr
			}
		}
		done, err := m.RevertMigrations(ctx, n, guard)
		switch {
		case guardErr != nil:
			return guardErr
		case err != nil:
			return errorf("rolling back %s: %v", db.t.display, err)
		case len(done) == 0:
			fmt.Fprintf(r.env.Stdout, "%s has no migrations applied: nothing to roll back\n", r.migrateName(db))
			return nil
		}
		for _, mg := range done {
			fmt.Fprintf(r.env.Stdout, "rolled back %03d_%s\n", mg.Version, mg.Name)
		}
		after, left, err := migrationStatus(ctx, m, db)
		if err != nil {
			return err
		}
		fmt.Fprintf(r.env.Stdout, "%s: %d of %d migrations applied\n", r.migrateName(db), left, len(after))
		return nil
	})
}

func cmdMigrateStatus(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto migrate status [flags]", "List every migration and when it was applied.").withDatabase()
	if _, err := fs.parse(args, 0, 0); err != nil {
		return err
	}
	return r.withMigrations(ctx, false, func(_ migrator, db *database, ms []store.Migration, applied int) error {
		tw := tabwriter.NewWriter(r.env.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "VERSION\tNAME\tAPPLIED")
		for _, mg := range ms {
			at := "pending"
			if mg.Applied {
				at = mg.AppliedAt.Local().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%03d\t%s\t%s\n", mg.Version, mg.Name, at)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if u, ok := db.store.(persistenceSetter); ok && applied > 0 {
			if on, err := u.Unlogged(ctx); err == nil && on {
				fmt.Fprintln(r.env.Stdout, "the jobs table is UNLOGGED: a database crash deletes every job (pronto migrate up --logged makes it durable)")
			}
		}
		if err := refuseNewer(ctx, db); err != nil {
			return err
		}
		if pending := len(ms) - applied; pending > 0 {
			fmt.Fprintf(r.env.Stdout, "%d of %d migrations pending; apply them with: pronto migrate up%s\n", pending, len(ms), db.urlFlag())
		} else {
			fmt.Fprintf(r.env.Stdout, "%s is up to date: %d of %d migrations applied\n", r.migrateName(db), applied, len(ms))
		}
		if note := newerNote(ctx, db); note != "" {
			fmt.Fprintln(r.env.Stdout, note)
		}
		return nil
	})
}

// persistenceSetter is the PostgreSQL store's choice between a logged and an UNLOGGED jobs table.
type persistenceSetter interface {
	SetUnlogged(ctx context.Context, on bool) error
	Unlogged(ctx context.Context) (bool, error)
}

// presenceListen is how long migrate down listens for clients' presence announcements on
// PostgreSQL when no leader lease is live: clients working queues announce themselves every second.
const presenceListen = 1500 * time.Millisecond

// guardDown refuses, unless force, a rollback of n migrations that deletes data or runs while
// clients use the schema, saying what it found. Forced, it says what it deletes and goes on.
//
// Clients are known live by their leader leases (store.DownPlanner.LiveLeases): every started client
// with maintenance enabled renews one, or contends for it, every second. On PostgreSQL, where
// presence is announced over notifications and not stored, it also listens briefly for the
// announcements of clients that work queues with maintenance disabled. Insert-only clients leave no
// trace and are not detected.
func (r *runner) guardDown(ctx context.Context, p store.DownPlanner, db *database, n int, force bool) error {
	loss, err := p.DownDataLoss(ctx, n)
	if err != nil {
		return errorf("previewing the rollback of %s: %v", db.t.display, err)
	}
	live, err := liveClients(ctx, p, db, !force)
	if err != nil {
		return err
	}
	if len(loss) == 0 && len(live) == 0 {
		return nil
	}
	// One line, like every error of the CLI: what would be deleted, then who is live.
	var parts []string
	if len(loss) > 0 {
		items := make([]string, len(loss))
		for i, l := range loss {
			if l.Column == "" {
				items[i] = fmt.Sprintf("%s of table %s", plural(l.Rows, "row"), l.Table)
			} else {
				items[i] = fmt.Sprintf("the %s values of column %s.%s", plural(l.Rows, ""), l.Table, l.Column)
			}
			items[i] += fmt.Sprintf(" (%03d_%s)", l.Migration.Version, l.Migration.Name)
		}
		parts = append(parts, "it would delete "+strings.Join(items, ", "))
	}
	if len(live) > 0 {
		parts = append(parts, "clients are using the schema: "+strings.Join(live, ", "))
	}
	found := strings.Join(parts, "; ")
	if force {
		fmt.Fprintf(r.env.Stdout, "rolling back %s with --force: %s\n", db.t.display, found)
		return nil
	}
	var advice []string
	if len(live) > 0 {
		advice = append(advice, "stop the clients")
	}
	if len(loss) > 0 {
		advice = append(advice, "keep a copy of what you need")
	}
	return errorf("refusing to roll back %s: %s; %s, or pass --force to roll back anyway",
		db.t.display, found, strings.Join(advice, " and "))
}

// liveClients names the clients found using db's schema: those holding leader leases, and when
// none does and listen is set, on PostgreSQL, those heard announcing their presence.
func liveClients(ctx context.Context, p store.DownPlanner, db *database, listen bool) ([]string, error) {
	leases, err := p.LiveLeases(ctx)
	if err != nil {
		return nil, errorf("looking for live clients of %s: %v", db.t.display, err)
	}
	var live []string
	for _, l := range leases {
		live = append(live, fmt.Sprintf("client %s (leader of %s)", l.LeaderID, l.Name))
	}
	if len(live) == 0 && listen && db.t.kind == kindPostgres {
		live = listenForPresence(db.store.Notifier(), presenceListen)
	}
	return live, nil
}

// incompatibleMigrations is implemented by the stores whose migrations say whether older binaries
// may run on their schema (PostgreSQL, SQLite).
type incompatibleMigrations interface {
	IncompatibleMigrations() ([]store.Migration, error)
}

// pendingIncompatible returns the migrations of ms (the schema's, applied or not) that are pending
// and marked incompatible with older binaries. A variable, so that tests can play a release that
// has such a migration.
var pendingIncompatible = func(db *database, ms []store.Migration) ([]store.Migration, error) {
	im, ok := db.store.(incompatibleMigrations)
	if !ok {
		return nil, nil
	}
	marked, err := im.IncompatibleMigrations()
	if err != nil {
		return nil, err
	}
	var out []store.Migration
	for _, m := range marked {
		if i := m.Version - 1; i >= 0 && i < len(ms) && !ms[i].Applied {
			out = append(out, m)
		}
	}
	return out, nil
}

// guardIncompatible refuses, unless force, to apply a migration marked incompatible with older
// binaries to a schema that clients use: they run the older release (the newer one refuses to start
// before the migration), and a running client does not check the schema again, so it would go on
// running on a schema its code breaks or corrupts. A schema with nothing applied has no such client.
func (r *runner) guardIncompatible(ctx context.Context, db *database, ms []store.Migration, applied int, force bool) error {
	if applied == 0 {
		return nil
	}
	pending, err := pendingIncompatible(db, ms)
	if err != nil {
		return errorf("reading the migrations of %s: %v", db.t.display, err)
	}
	p, ok := db.store.(store.DownPlanner)
	if len(pending) == 0 || !ok {
		return nil
	}
	live, err := liveClients(ctx, p, db, !force)
	if err != nil || len(live) == 0 {
		return err
	}
	names := make([]string, len(pending))
	for i, m := range pending {
		names[i] = fmt.Sprintf("%03d_%s", m.Version, m.Name)
	}
	found := fmt.Sprintf("%s, marked incompatible with older binaries, while clients use the schema: %s",
		strings.Join(names, ", "), strings.Join(live, ", "))
	if force {
		fmt.Fprintf(r.env.Stdout, "migrating %s with --force: applying %s\n", db.t.display, found)
		return nil
	}
	return errorf("refusing to migrate %s: it would apply %s; stop the clients of the older release, or pass --force to apply it anyway",
		db.t.display, found)
}

// listenForPresence returns the clients whose presence announcements are heard within d, or
// nothing when d passes without one.
func listenForPresence(n store.Notifier, d time.Duration) []string {
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
		out  []string
	)
	heard := make(chan struct{}, 1)
	unsubscribe := n.Subscribe(func(note store.Notification) {
		if note.Kind != store.NotifyPresence {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !seen[note.Client] {
			seen[note.Client] = true
			out = append(out, fmt.Sprintf("client %s (working queue %s)", note.Client, note.Queue))
		}
		select {
		case heard <- struct{}{}:
		default:
		}
	})
	defer unsubscribe()
	select {
	case <-heard:
	case <-time.After(d):
	}
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(out)
}

// plural writes n with its noun ("1 row", "2 rows"; noun "" gives the number alone).
func plural(n int64, noun string) string {
	switch {
	case noun == "":
		return fmt.Sprint(n)
	case n == 1:
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
