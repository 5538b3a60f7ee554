package pronto_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

// TestZeroWithHugeExponentRefusedAlike: `0e-20000` is a JSON zero (an exact 0 as a double), but
// PostgreSQL's numeric refuses it ("value overflows numeric format", SQLSTATE 22003). It is refused
// as ErrInvalidArgs on every store alike, as 1e1000000 is; it used to pass the check, and then
// PostgreSQL answered with a raw database error while SQLite and memory stored it.
func TestZeroWithHugeExponentRefusedAlike(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c := startClient(t, ts.Store, &pronto.Config{})
		_, err := c.InsertRaw(ctx, []pronto.RawJob{{Kind: "a.b", Args: json.RawMessage(`[0e-20000]`)}})
		require.Error(t, err, "a number PostgreSQL cannot store is refused on every store alike")
		require.True(t, errors.Is(err, pronto.ErrInvalidArgs), "want ErrInvalidArgs, got %v", err)
	})
}

// TestResultZeroWithHugeExponent: RecordResult refuses a result holding `0e-20000` (ErrInvalidArgs,
// as it does a NUL). It used to accept it; the outcome's write then failed on PostgreSQL (22003) and
// the completer retried its whole batch for good, holding every other outcome of the client (a
// batch the store refuses is now split, and the refused outcome given up:
// internal/completer's TestRefusedOutcomeHoldsNoOther).
func TestResultZeroWithHugeExponent(t *testing.T) {
	ts := newTestStore(t, kindPostgres)
	recErr := make(chan error, 1)
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[echoArgs]) error {
		if j.Args.Message != "poison" {
			return pronto.RecordResult(ctx, map[string]string{"v": j.Args.Message})
		}
		err := pronto.RecordResult(ctx, json.RawMessage(`{"v":0e-20000}`))
		select {
		case recErr <- err:
		default:
		}
		return nil
	}))
	c := startClient(t, ts.Store, fastConfig(workers, defaultQueue(2)))
	ctx := context.Background()
	poison, err := c.Insert(ctx, echoArgs{Message: "poison"}, nil)
	require.NoError(t, err)
	var got error
	select {
	case got = <-recErr:
	case <-time.After(15 * time.Second):
		t.Fatal("job never ran")
	}
	assertErrorIs(t, got, pronto.ErrInvalidArgs, "RecordResult should refuse a result PostgreSQL cannot store")

	// Another job, inserted after: its outcome must be written whatever became of the first one's.
	other, err := c.Insert(ctx, echoArgs{Message: "fine"}, nil)
	require.NoError(t, err)
	waitState(t, c, other.ID, pronto.StateCompleted)
	j, err := c.JobGet(ctx, poison.ID)
	require.NoError(t, err)
	require.NotEqual(t, pronto.StateActive, j.State, "the poisoned job's attempt never ends")
}

func assertErrorIs(t *testing.T, err, target error, msg string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got %v", msg, err)
	}
}
