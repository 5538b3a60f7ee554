package finishbatch

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

// TestPartlyWrittenBatchAnswersWrittenOutcomes: a store that writes a batch in parts (Redis, one
// call per queue) and fails after writing some answers with a FinishPartialError; the callers whose
// outcome was written get its result (applied), and only the others are written again. Writing a
// written outcome again would report it not applied: an ack that did apply answered 409.
func TestPartlyWrittenBatchAnswersWrittenOutcomes(t *testing.T) {
	s := memory.New()
	cs := claimed(t, s, 4)
	var mu sync.Mutex
	var sent [][]string
	finish := func(ctx context.Context, batch []store.Completion) ([]store.FinishResult, error) {
		mu.Lock()
		ids := make([]string, len(batch))
		for i, c := range batch {
			ids[i] = c.ID
		}
		sent = append(sent, ids)
		first := len(sent) == 1
		mu.Unlock()
		if !first || len(batch) < 2 {
			return s.Finish(ctx, batch)
		}
		// The first write: the first half is written, the second half's call fails.
		half := len(batch) / 2
		res, err := s.Finish(ctx, batch[:half])
		if err != nil {
			return nil, err
		}
		p := &store.FinishPartialError{Results: make([]store.FinishResult, len(batch)), Known: make([]bool, len(batch)),
			Err: errors.New("connection reset")}
		for i := range half {
			p.Results[i], p.Known[i] = res[i], true
		}
		return nil, p
	}
	b := New(Config{Finish: finish, MaxFlights: 1})
	// Hold the batcher's one flight so that the four outcomes go in one write.
	b.mu.Lock()
	b.flights = 1
	b.mu.Unlock()
	var wg sync.WaitGroup
	applied := make([]bool, len(cs))
	errs := make([]error, len(cs))
	for i := range cs {
		wg.Go(func() { applied[i], errs[i] = b.Finish(context.Background(), cs[i]) })
	}
	require.Eventually(t, func() bool { return waiting(b) == len(cs) }, 10*time.Second, time.Millisecond)
	b.mu.Lock()
	batch := b.take()
	b.mu.Unlock()
	go b.fly(batch)
	wg.Wait()
	for i := range cs {
		require.NoError(t, errs[i], "outcome %d", i)
		require.True(t, applied[i], "outcome %d was written once and applied", i)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, sent[0], 4)
	var again []string
	for _, ids := range sent[1:] {
		again = append(again, ids...)
	}
	require.ElementsMatch(t, sent[0][2:], again, "only the outcomes whose write failed are sent again")
}
