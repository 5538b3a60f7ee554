package pronto_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store/postgres"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

type effectArgs struct {
	// Fail makes Work return an error after its transaction.
	Fail bool `json:"fail"`
	// Rollback rolls the work's transaction back instead of committing it.
	Rollback bool `json:"rollback"`
}

func (effectArgs) Kind() string { return "test.effect" }

// effectsTable is the application's own table the effect workers write, in the store's schema.
func effectsTable(ts *testStore) string {
	if ts.kind == kindPostgres {
		return pgx.Identifier{ts.schema, "effects"}.Sanitize()
	}
	return "effects"
}

// appTx is an application transaction on the store's database, in which a worker writes its effect.
type appTx struct {
	exec     func(ctx context.Context, q string, args ...any) error
	complete func(ctx context.Context) error
	commit   func(ctx context.Context) error
	rollback func(ctx context.Context) error
}

func beginAppTx(t *testing.T, ctx context.Context, ts *testStore) (*appTx, error) {
	switch ts.kind {
	case kindPostgres:
		tx, err := ts.Store.(*postgres.Store).Pool().Begin(ctx)
		if err != nil {
			return nil, err
		}
		return &appTx{
			exec:     func(ctx context.Context, q string, args ...any) error { _, err := tx.Exec(ctx, q, args...); return err },
			complete: func(ctx context.Context) error { return pronto.CompleteTx(ctx, tx) },
			commit:   tx.Commit, rollback: tx.Rollback,
		}, nil
	case kindSQLite:
		tx, err := ts.Store.(*sqlite.Store).DB().BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		return &appTx{
			exec: func(ctx context.Context, q string, args ...any) error {
				_, err := tx.ExecContext(ctx, q, args...)
				return err
			},
			complete: func(ctx context.Context) error { return pronto.CompleteSQLTx(ctx, tx) },
			commit:   func(context.Context) error { return tx.Commit() },
			rollback: func(context.Context) error { return tx.Rollback() },
		}, nil
	}
	t.Fatalf("no application transactions on a %s store", ts.kind)
	return nil, nil
}

func createEffects(t *testing.T, ts *testStore) {
	t.Helper()
	q := `CREATE TABLE ` + effectsTable(ts) + ` (job_id TEXT NOT NULL, attempt INTEGER NOT NULL)`
	switch ts.kind {
	case kindPostgres:
		_, err := testdb.Pool(t).Exec(context.Background(), q)
		require.NoError(t, err)
	case kindSQLite:
		_, err := ts.Store.(*sqlite.Store).DB().Exec(q)
		require.NoError(t, err)
	}
}

func countEffects(t *testing.T, ts *testStore, id string) int {
	t.Helper()
	var n int
	q := `SELECT count(*) FROM ` + effectsTable(ts) + ` WHERE job_id = `
	switch ts.kind {
	case kindPostgres:
		require.NoError(t, testdb.Pool(t).QueryRow(context.Background(), q+`$1`, id).Scan(&n))
	case kindSQLite:
		require.NoError(t, ts.Store.(*sqlite.Store).DB().QueryRow(q+`?`, id).Scan(&n))
	}
	return n
}

// effectWorker writes one effect row and completes the job in the same transaction.
func effectWorker(ts *testStore) pronto.Worker[effectArgs] {
	return pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[effectArgs]) error {
		tx, err := beginAppTx(nil, ctx, ts)
		if err != nil {
			return err
		}
		ph := "$1, $2"
		if ts.kind == kindSQLite {
			ph = "?, ?"
		}
		if err := tx.exec(ctx, `INSERT INTO `+effectsTable(ts)+` VALUES (`+ph+`)`, j.ID, j.Attempt); err != nil {
			_ = tx.rollback(ctx)
			return err
		}
		if err := pronto.RecordResult(ctx, map[string]int{"attempt": j.Attempt}); err != nil {
			return err
		}
		if err := tx.complete(ctx); err != nil {
			_ = tx.rollback(ctx)
			return err
		}
		if j.Args.Rollback {
			_ = tx.rollback(ctx)
		} else if err := tx.commit(ctx); err != nil {
			return err
		}
		if j.Args.Fail {
			return errors.New("failed after its transaction")
		}
		return nil
	})
}

// TestCompleteTx: the completion commits with the work's own write, and then nothing else is written
// for the run, whatever Work returns; a rolled-back completion leaves Work's return to decide.
func TestCompleteTx(t *testing.T) {
	for _, kind := range []storeKind{kindSQLite, kindPostgres} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ts := newTestStore(t, kind)
			createEffects(t, ts)
			workers := pronto.NewWorkers()
			pronto.AddWorker(workers, effectWorker(ts))
			c := startClient(t, ts.Store, fastConfig(workers, defaultQueue(4)))
			events, stop := c.Subscribe()
			defer stop()

			committed, err := c.Insert(ctx, effectArgs{Fail: true}, nil)
			require.NoError(t, err)
			j := waitState(t, c, committed.ID, pronto.StateCompleted)
			require.Equal(t, 1, j.Attempt)
			require.JSONEq(t, `{"attempt":1}`, string(j.Result))
			require.Empty(t, j.Errors, "Work's error after the commit wrote no outcome")
			require.Equal(t, 1, countEffects(t, ts, committed.ID))

			rolledBack, err := c.Insert(ctx, effectArgs{Rollback: true}, nil)
			require.NoError(t, err)
			j = waitState(t, c, rolledBack.ID, pronto.StateCompleted)
			require.Equal(t, 1, j.Attempt, "completed by Work's return, the staged way")
			require.Equal(t, 0, countEffects(t, ts, rolledBack.ID), "the rolled-back work wrote nothing")

			completedEvents := map[string]int{}
			deadline := time.After(10 * time.Second)
			for completedEvents[committed.ID] == 0 || completedEvents[rolledBack.ID] == 0 {
				select {
				case e := <-events:
					if e.Kind == pronto.EventCompleted {
						completedEvents[e.Job.ID]++
					}
					require.NotEqual(t, pronto.EventFailed, e.Kind, "no failure is reported for a job its transaction completed")
				case <-deadline:
					t.Fatalf("completed events: %v", completedEvents)
				}
			}
		})
	}
}

// TestCompleteTxRefusedWhenTheRunLostTheJob: a run whose job was cancelled cannot complete it in its
// transaction; CompleteTx says why, and the application rolls its work back.
func TestCompleteTxRefusedWhenTheRunLostTheJob(t *testing.T) {
	for _, kind := range []storeKind{kindSQLite, kindPostgres} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ts := newTestStore(t, kind)
			started, refused := make(chan string, 1), make(chan error, 1)
			workers := pronto.NewWorkers()
			pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[effectArgs]) error {
				started <- j.ID
				<-ctx.Done()
				tx, err := beginAppTx(t, context.WithoutCancel(ctx), ts)
				if err != nil {
					refused <- err
					return err
				}
				// Told by its context, and, past that, by the store's claim check.
				err = tx.complete(ctx)
				if err == nil || !errors.Is(err, pronto.ErrJobCancelled) {
					refused <- fmt.Errorf("with the run's context: %w", err)
				} else {
					err = tx.complete(context.WithoutCancel(ctx))
					refused <- err
				}
				_ = tx.rollback(context.WithoutCancel(ctx))
				return err
			}))
			c := startClient(t, ts.Store, fastConfig(workers, defaultQueue(2)))
			row, err := c.Insert(ctx, effectArgs{}, nil)
			require.NoError(t, err)
			<-started
			_, err = c.JobCancel(ctx, row.ID)
			require.NoError(t, err)
			select {
			case err := <-refused:
				require.ErrorIs(t, err, pronto.ErrJobCancelled)
			case <-time.After(15 * time.Second):
				t.Fatal("the worker never tried to complete")
			}
			require.Equal(t, pronto.StateCancelled, waitState(t, c, row.ID, pronto.StateCancelled).State)
		})
	}
}

// TestCompleteTxSurvivesACrashBeforeCommit: a worker process writes its effect and completes its job
// in one transaction, and is SIGKILLed before it commits. Nothing of that run remains: the job runs
// again and its effect is written once. In staged mode the same crash, after the effect commits and
// before the outcome is written, leaves the effect written twice.
func TestCompleteTxSurvivesACrashBeforeCommit(t *testing.T) {
	for _, mode := range []string{"atomic", "staged"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ts := newTestStore(t, kindPostgres)
			createEffects(t, ts)
			admin, err := pronto.NewClient(ts.Store, nil)
			require.NoError(t, err)
			row, err := admin.Insert(ctx, effectArgs{}, nil)
			require.NoError(t, err)

			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "PRONTO_TEST_EFFECT_WORKER="+mode, "PRONTO_TEST_SCHEMA="+ts.schema)
			stdout, err := cmd.StdoutPipe()
			require.NoError(t, err)
			cmd.Stderr = os.Stderr
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			lines := bufio.NewScanner(stdout)
			require.True(t, lines.Scan(), "the worker process said nothing")
			require.Equal(t, "ready "+row.ID, lines.Text())
			require.NoError(t, cmd.Process.Kill()) // between the work and the commit
			_ = cmd.Wait()

			workers := pronto.NewWorkers()
			pronto.AddWorker(workers, effectWorker(ts))
			c := startClient(t, ts.Store, fastConfig(workers, defaultQueue(2)))
			j := waitState(t, c, row.ID, pronto.StateCompleted)
			require.Equal(t, 2, j.Attempt, "the killed run's attempt was taken back by the rescuer")
			want := map[string]int{"atomic": 1, "staged": 2}[mode]
			require.Equal(t, want, countEffects(t, ts, row.ID), "effects written in %s mode", mode)
		})
	}
}

// runEffectHelper is the worker process of TestCompleteTxSurvivesACrashBeforeCommit: it takes one
// job, writes its effect (and, in atomic mode, its completion) and stops before the commit (atomic)
// or before Work returns (staged), saying "ready ID", until it is killed.
func runEffectHelper(mode string) int {
	ctx := context.Background()
	pool := testdb.NewPool(&helperTB{}, 3)
	s, err := postgres.New(pool, postgres.Config{Schema: os.Getenv("PRONTO_TEST_SCHEMA")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	table := pgx.Identifier{os.Getenv("PRONTO_TEST_SCHEMA"), "effects"}.Sanitize()
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[effectArgs]) error {
		if mode == "staged" {
			if _, err := pool.Exec(ctx, `INSERT INTO `+table+` VALUES ($1, $2)`, j.ID, j.Attempt); err != nil {
				return err
			}
		} else {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+table+` VALUES ($1, $2)`, j.ID, j.Attempt); err != nil {
				return err
			}
			if err := pronto.CompleteTx(ctx, tx); err != nil {
				return err
			}
		}
		fmt.Println("ready " + j.ID)
		select {} // the process is killed here
	}))
	cfg := fastConfig(workers, defaultQueue(1))
	c, err := pronto.NewClient(s, cfg)
	if err == nil {
		err = c.Start(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, strings.TrimSpace(err.Error()))
		return 1
	}
	select {}
}
