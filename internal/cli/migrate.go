package cli

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// withMigrations opens the database for a migrate command, reads its migrations and how many are
// applied, and runs fn with them. For a store without a schema it says so and runs nothing.
func (r *runner) withMigrations(ctx context.Context, create bool,
	fn func(m store.Migrator, db *database, ms []store.Migration, applied int) error) error {
	db, err := r.open(ctx, openOptions{noSchemaCheck: true, create: create})
	if err != nil {
		return err
	}
	defer db.Close()
	m, ok := db.store.(store.Migrator)
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

// status returns the migrations and how many are applied.
func migrationStatus(ctx context.Context, m store.Migrator, db *database) ([]store.Migration, int, error) {
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
	fs := r.newFlagSet("pronto migrate up [flags]",
		"Apply every pending migration, creating the schema (and, for SQLite, the file) if needed.\n"+
			"Safe to run again, and from several processes at once.").withDatabase()
	if _, err := fs.parse(args, 0, 0); err != nil {
		return err
	}
	return r.withMigrations(ctx, true, func(m store.Migrator, db *database, before []store.Migration, _ int) error {
		if err := db.store.Migrate(ctx); err != nil {
			return errorf("migrating %s: %v", db.t.display, err)
		}
		ms, after, err := migrationStatus(ctx, m, db)
		if err != nil {
			return err
		}
		for i, mg := range ms {
			if mg.Applied && (i >= len(before) || !before[i].Applied) {
				fmt.Fprintf(r.env.Stdout, "applied %03d_%s\n", mg.Version, mg.Name)
			}
		}
		fmt.Fprintf(r.env.Stdout, "%s is up to date: %d of %d migrations applied\n", db.t.display, after, len(ms))
		return nil
	})
}

func cmdMigrateDown(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto migrate down [--steps N | --all] [flags]",
		"Roll back the latest applied migrations, newest first. Rolling back the first migration drops\n"+
			"the jobs table and every job in it.").withDatabase()
	steps := fs.Int("steps", 1, "roll back `N` migrations")
	all := fs.Bool("all", false, "roll back every migration (drops every job)")
	if _, err := fs.parse(args, 0, 0); err != nil {
		return err
	}
	if *steps < 1 {
		return usageErrorf("migrate down: --steps %d: must be at least 1", *steps)
	}
	return r.withMigrations(ctx, false, func(m store.Migrator, db *database, before []store.Migration, applied int) error {
		if applied == 0 {
			fmt.Fprintf(r.env.Stdout, "%s has no migrations applied: nothing to roll back\n", db.t.display)
			return nil
		}
		n := *steps
		if *all {
			n = applied
		}
		if err := m.MigrateDown(ctx, n); err != nil {
			return errorf("rolling back %s: %v", db.t.display, err)
		}
		after, left, err := migrationStatus(ctx, m, db)
		if err != nil {
			return err
		}
		for i := len(before) - 1; i >= 0; i-- {
			if before[i].Applied && i < len(after) && !after[i].Applied {
				fmt.Fprintf(r.env.Stdout, "rolled back %03d_%s\n", before[i].Version, before[i].Name)
			}
		}
		fmt.Fprintf(r.env.Stdout, "%s: %d of %d migrations applied\n", db.t.display, left, len(after))
		return nil
	})
}

func cmdMigrateStatus(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto migrate status [flags]", "List every migration and when it was applied.").withDatabase()
	if _, err := fs.parse(args, 0, 0); err != nil {
		return err
	}
	return r.withMigrations(ctx, false, func(_ store.Migrator, db *database, ms []store.Migration, applied int) error {
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
		if pending := len(ms) - applied; pending > 0 {
			fmt.Fprintf(r.env.Stdout, "%d of %d migrations pending; apply them with: pronto migrate up%s\n", pending, len(ms), db.urlFlag())
		} else {
			fmt.Fprintf(r.env.Stdout, "up to date: %d of %d migrations applied\n", applied, len(ms))
		}
		return nil
	})
}
