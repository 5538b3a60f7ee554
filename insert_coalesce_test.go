package pronto_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// coalesceStores runs f on a fresh store of each kind, as parallel subtests.
func coalesceStores(t *testing.T, f func(t *testing.T, s store.Store)) {
	for _, k := range allStores {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			f(t, newTestStore(t, k).Store)
		})
	}
}

// TestConcurrentInsertsGetTheirOwnOutcome inserts from many goroutines at once through one client:
// every caller gets its own job, and the callers whose job is refused (a unique conflict, an id
// already taken, bad options) get their own error without failing the others.
func TestConcurrentInsertsGetTheirOwnOutcome(t *testing.T) {
	coalesceStores(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		var writes, merged atomic.Int32
		c, err := pronto.NewClient(countingStore{Store: s, writes: &writes, merged: &merged}, nil)
		require.NoError(t, err)
		taken, err := c.Insert(ctx, echoArgs{Message: "taken"}, nil)
		require.NoError(t, err)

		const plain, uniques = 150, 10
		unique := &pronto.UniqueOpts{ByArgs: true}
		var won, conflicts, dup, invalid atomic.Int32
		ids := make([]string, plain)
		var wg sync.WaitGroup
		for i := range plain {
			wg.Add(1)
			go func() {
				defer wg.Done()
				j, err := c.Insert(ctx, echoArgs{Message: "plain", N: i}, nil)
				if err != nil {
					t.Errorf("insert %d: %v", i, err)
					return
				}
				var args []echoArgs
				if err := json.Unmarshal(j.Args, &args); err != nil || len(args) != 1 || args[0].N != i {
					t.Errorf("insert %d got back job %s with args %s", i, j.ID, j.Args)
				}
				ids[i] = j.ID
			}()
		}
		for range uniques {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := c.Insert(ctx, echoArgs{Message: "once"}, &pronto.InsertOpts{Unique: unique})
				switch {
				case err == nil:
					won.Add(1)
				case errors.Is(err, pronto.ErrUniqueConflict):
					conflicts.Add(1)
				default:
					t.Errorf("unique insert: %v", err)
				}
			}()
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, err := c.Insert(ctx, echoArgs{Message: "again"}, &pronto.InsertOpts{ID: taken.ID})
			if errors.Is(err, pronto.ErrDuplicate) {
				dup.Add(1)
			} else {
				t.Errorf("insert with a taken id: %v", err)
			}
		}()
		go func() {
			defer wg.Done()
			_, err := c.Insert(ctx, echoArgs{Message: "bad"}, &pronto.InsertOpts{Priority: pronto.PriorityMax + 1})
			if errors.Is(err, pronto.ErrInvalidArgs) {
				invalid.Add(1)
			} else {
				t.Errorf("insert with a bad priority: %v", err)
			}
		}()
		wg.Wait()
		require.EqualValues(t, 1, won.Load(), "exactly one unique insert wins")
		require.EqualValues(t, uniques-1, conflicts.Load())
		require.EqualValues(t, 1, dup.Load())
		require.EqualValues(t, 1, invalid.Load())

		seen := map[string]bool{}
		for i, id := range ids {
			require.NotEmpty(t, id, "insert %d", i)
			require.False(t, seen[id], "two callers got job %s", id)
			seen[id] = true
			j, err := c.JobGet(ctx, id)
			require.NoError(t, err)
			require.Equal(t, pronto.StateAvailable, j.State)
		}
		list, err := c.JobList(ctx, &pronto.JobListParams{Kinds: []string{"test.echo"}, Limit: 1000})
		require.NoError(t, err)
		require.Len(t, list.Jobs, 1+plain+1, "the taken one, the plain ones and the unique winner")
		t.Logf("%d store writes for %d jobs (%d writes merged several jobs)", writes.Load(), 2+plain+uniques, merged.Load())
	})
}

// TestInsertBatchSizeOneWritesAlone checks that Config.InsertBatchSize 1 writes every insert on its
// own, concurrent or not.
func TestInsertBatchSizeOneWritesAlone(t *testing.T) {
	ctx := context.Background()
	var writes, merged atomic.Int32
	c, err := pronto.NewClient(countingStore{Store: newTestStore(t, kindMemory).Store, writes: &writes, merged: &merged},
		&pronto.Config{InsertBatchSize: 1})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Insert(ctx, echoArgs{N: i}, nil)
			require.NoError(t, err)
		}()
	}
	wg.Wait()
	require.EqualValues(t, 50, writes.Load())
	require.Zero(t, merged.Load())
}

// TestLocalStoreInsertsAreNotMerged checks that inserts into a store whose inserts are in-process
// (store.LocalInserter: the memory store) are written one by one even when concurrent.
func TestLocalStoreInsertsAreNotMerged(t *testing.T) {
	ctx := context.Background()
	var writes, merged atomic.Int32
	mem := newTestStore(t, kindMemory).Store
	_, isLocal := mem.(store.LocalInserter)
	require.True(t, isLocal, "the memory store declares its inserts local")
	c, err := pronto.NewClient(localStore{countingStore{Store: mem, writes: &writes, merged: &merged}}, nil)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Insert(ctx, echoArgs{N: i}, nil)
			require.NoError(t, err)
		}()
	}
	wg.Wait()
	require.EqualValues(t, 50, writes.Load())
	require.Zero(t, merged.Load())
}

// localStore declares its inserts in-process, as the memory store does.
type localStore struct{ countingStore }

func (localStore) InsertsAreLocal() bool { return true }

// TestInsertCancelledBeforeWrite checks that an insert whose context has ended is refused with the
// context's error and stores nothing.
func TestInsertCancelledBeforeWrite(t *testing.T) {
	coalesceStores(t, func(t *testing.T, s store.Store) {
		c, err := pronto.NewClient(s, nil)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err = c.Insert(ctx, echoArgs{Message: "never"}, nil)
		require.ErrorIs(t, err, context.Canceled)
		list, err := c.JobList(context.Background(), &pronto.JobListParams{Kinds: []string{"test.echo"}})
		require.NoError(t, err)
		require.Empty(t, list.Jobs)
	})
}

// countingStore counts the store writes Insert makes, and those that carried several jobs.
type countingStore struct {
	store.Store
	writes, merged *atomic.Int32
}

func (s countingStore) Insert(ctx context.Context, ps []*store.InsertParams) ([]*store.Job, error) {
	s.writes.Add(1)
	if len(ps) > 1 {
		s.merged.Add(1)
	}
	return s.Store.Insert(ctx, ps)
}

// TestInsertBatchSizeNegative checks that a negative InsertBatchSize is refused by name.
func TestInsertBatchSizeNegative(t *testing.T) {
	_, err := pronto.NewClient(newTestStore(t, kindMemory).Store, &pronto.Config{InsertBatchSize: -1})
	require.ErrorContains(t, err, "InsertBatchSize -1 is negative")
}

// TestInsertMiddlewareSeesEachCallAlone checks that insert middleware runs once per Insert call,
// with that call's job only, when concurrent inserts are merged below it, and that what it changes
// is what gets stored.
func TestInsertMiddlewareSeesEachCallAlone(t *testing.T) {
	coalesceStores(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		var calls, wider atomic.Int32
		var writes, merged atomic.Int32
		mw := func(ctx context.Context, ps []*pronto.JobInsertParams, next pronto.InsertFunc) ([]*pronto.JobRow, error) {
			calls.Add(1)
			if len(ps) != 1 {
				wider.Add(1)
			}
			for _, p := range ps {
				p.Tags = append(p.Tags, "seen")
			}
			return next(ctx, ps)
		}
		c, err := pronto.NewClient(countingStore{Store: s, writes: &writes, merged: &merged},
			&pronto.Config{InsertMiddleware: []pronto.InsertMiddleware{mw}})
		require.NoError(t, err)
		const n = 40
		ids := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				j, err := c.Insert(ctx, echoArgs{N: i}, nil)
				if err != nil {
					t.Error(err)
					return
				}
				ids[i] = j.ID
			}()
		}
		wg.Wait()
		require.EqualValues(t, n, calls.Load())
		require.Zero(t, wider.Load(), "middleware sees one job per Insert")
		for _, id := range ids {
			j, err := c.JobGet(ctx, id)
			require.NoError(t, err)
			require.Equal(t, []string{"seen"}, j.Tags)
		}
	})
}
