package memory

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// TestExportedJobSizeClass: exportedJob stays in store.Job's own size class (704 bytes, of which the
// runtime takes 8 for the header of a large object with pointers), so the bytes it carries for a
// job's raw JSON cost no memory. When store.Job grows, shrink exportInline.
func TestExportedJobSizeClass(t *testing.T) {
	require.LessOrEqual(t, unsafe.Sizeof(exportedJob{}), uintptr(704-8),
		"store.Job is %d bytes now: exportedJob left the 704-byte size class", unsafe.Sizeof(store.Job{}))
	r := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			sink = new(exportedJob)
		}
	})
	require.EqualValues(t, 704, r.AllocedBytesPerOp(), "bytes a handed-out job takes")
}

var sink *exportedJob

// TestExportedJobsShareNothing: a claimed job's raw JSON fields, inline (small) or apart (large),
// hold what was inserted, and writing to them or appending to one changes neither the others nor
// the stored job.
func TestExportedJobsShareNothing(t *testing.T) {
	ctx := context.Background()
	s := New()
	defer s.Close()
	for _, args := range []string{`[1]`, `["` + strings.Repeat("x", 200) + `"]`} {
		meta := json.RawMessage(`{"m":1}`)
		in, err := s.Insert(ctx, []*store.InsertParams{{ID: uuidv7.New(), Kind: "k", Queue: "q", Args: json.RawMessage(args), Meta: meta,
			State: store.StateAvailable, MaxAttempts: 1}})
		require.NoError(t, err)
		got, err := s.Claim(ctx, store.ClaimParams{Queue: "q", Kinds: []string{"k"}, Limit: 1, WorkerID: "w", LeaseDuration: time.Minute})
		require.NoError(t, err)
		require.Len(t, got, 1)
		j := got[0]
		require.Equal(t, in[0].ID, j.ID)
		require.JSONEq(t, args, string(j.Args))
		require.JSONEq(t, string(meta), string(j.Meta))
		_ = append(j.Args, `garbage`...) // must not reach Meta, which may follow it in one buffer
		require.JSONEq(t, string(meta), string(j.Meta), "args of %d bytes", len(args))
		j.Args[0], j.Meta[0] = 'X', 'X'
		stored, err := s.GetJob(ctx, j.ID)
		require.NoError(t, err)
		require.JSONEq(t, args, string(stored.Args))
		require.JSONEq(t, string(meta), string(stored.Meta))
	}
}
