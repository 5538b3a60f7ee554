package postgres

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// newStore builds a migrated store on pool in schema, closed when the test ends.
func newStore(t testing.TB, pool *pgxpool.Pool, schema string) *Store {
	t.Helper()
	s, err := New(pool, Config{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.NoError(t, s.Migrate(context.Background()))
	return s
}

// setup returns a migrated store in a fresh schema of the shared test pool.
func setup(t testing.TB) *Store {
	t.Helper()
	return newStore(t, testdb.Pool(t), testdb.Schema(t))
}

// setupHandoff is setup with the hand-off on or off (Config.NoHandoff).
func setupHandoff(t testing.TB, on bool) *Store {
	t.Helper()
	s := setup(t)
	if on {
		return s
	}
	off, err := New(s.pool, Config{Schema: s.schema, NoHandoff: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, off.Close()) })
	return off
}

// params returns insert params for one available job of kind "k" in queue.
func params(queue string) *store.InsertParams {
	return &store.InsertParams{
		ID:          uuidv7.New(),
		Kind:        "k",
		Queue:       queue,
		Args:        json.RawMessage(`[{"n":1}]`),
		State:       store.StateAvailable,
		MaxAttempts: 3,
	}
}

// recorder collects notifications.
type recorder struct {
	mu    sync.Mutex
	notes []store.Notification
}

func (r *recorder) add(n store.Notification) {
	r.mu.Lock()
	r.notes = append(r.notes, n)
	r.mu.Unlock()
}

// of returns the recorded notifications of kind.
func (r *recorder) of(kind store.NotificationKind) []store.Notification {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []store.Notification
	for _, n := range r.notes {
		if n.Kind == kind {
			out = append(out, n)
		}
	}
	return out
}

// subscribe records s's notifications until the test ends.
func subscribe(t testing.TB, s *Store) *recorder {
	t.Helper()
	r := &recorder{}
	unsub := s.Notifier().Subscribe(r.add)
	t.Cleanup(unsub)
	require.NotZero(t, s.ListenerPID(), "listener should be connected once Subscribe returns")
	return r
}

func TestNewValidatesSchema(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t)
	for _, bad := range []string{"Pronto", "1abc", "a-b", `a"b`, "a b", "pronto;drop", string(make([]byte, 64))} {
		_, err := New(pool, Config{Schema: bad})
		require.Error(t, err, "schema %q", bad)
	}
	s, err := New(pool, Config{})
	require.NoError(t, err)
	require.Equal(t, "pronto", s.Schema())
	require.Equal(t, "pronto_pronto", s.Channel())
	require.Same(t, pool, s.Pool())
	require.NoError(t, s.Close())
	_, err = New(nil, Config{})
	require.Error(t, err)
}

func TestChannelName(t *testing.T) {
	t.Parallel()
	long1 := "a123456789012345678901234567890123456789012345678901234567890x1"
	long2 := "a123456789012345678901234567890123456789012345678901234567890x2"
	require.Len(t, long1, 63)
	c1, c2 := channelName(long1), channelName(long2)
	require.LessOrEqual(t, len(c1), 63)
	require.LessOrEqual(t, len(c2), 63)
	require.NotEqual(t, c1, c2)
	require.Equal(t, "pronto_x", channelName("x"))
}

func TestPayloadRoundTrip(t *testing.T) {
	t.Parallel()
	due := time.UnixMilli(1_700_000_000_123)
	for _, tc := range []struct {
		payload string
		want    store.Notification
	}{
		{insertPayload("default", time.Time{}), store.Notification{Kind: store.NotifyInsert, Queue: "default"}},
		{insertPayload(`we"ird ✓ <q>\n`, due), store.Notification{Kind: store.NotifyInsert, Queue: `we"ird ✓ <q>\n`, DueAt: due}},
		{queuePayload("p", "q1"), store.Notification{Kind: store.NotifyPause, Queue: "q1"}},
		{queuePayload("r", "q1"), store.Notification{Kind: store.NotifyResume, Queue: "q1"}},
		{`{"k":"c","id":"abc"}`, store.Notification{Kind: store.NotifyCancel, JobID: "abc"}},
		{`{"k":"i","q":"q1","n":77,"d":0}`, store.Notification{Kind: store.NotifyInsert, Queue: "q1", Nonce: 77}},
		{signalPayload(store.Notification{Kind: store.NotifyPresence, Client: "c1", Queue: "q1", Fingerprint: "ab"}),
			store.Notification{Kind: store.NotifyPresence, Client: "c1", Queue: "q1", Fingerprint: "ab"}},
		{signalPayload(store.Notification{Kind: store.NotifyOverflow, Client: "c1", Queue: "q1"}),
			store.Notification{Kind: store.NotifyOverflow, Client: "c1", Queue: "q1"}},
		{signalPayload(store.Notification{Kind: store.NotifyGone, Client: "c1"}),
			store.Notification{Kind: store.NotifyGone, Client: "c1"}},
	} {
		got, ok := decodePayload(tc.payload)
		require.True(t, ok, tc.payload)
		require.Equal(t, tc.want.Kind, got.Kind)
		require.Equal(t, tc.want.Queue, got.Queue)
		require.Equal(t, tc.want.JobID, got.JobID)
		require.Equal(t, tc.want.Client, got.Client)
		require.Equal(t, tc.want.Fingerprint, got.Fingerprint)
		if tc.want.Kind != store.NotifyInsert || tc.want.Nonce != 0 {
			require.Equal(t, tc.want.Nonce, got.Nonce)
		} else {
			require.NotZero(t, got.Nonce, "insertPayload draws a nonce")
		}
		require.True(t, tc.want.DueAt.Equal(got.DueAt), "%v vs %v", tc.want.DueAt, got.DueAt)
	}
	require.Regexp(t, `^\{"k":"i","q":"default","n":[1-9][0-9]*,"d":0\}$`, insertPayload("default", time.Time{}))
	for _, bad := range []string{"", "{", `{"k":"x"}`, "null"} {
		_, ok := decodePayload(bad)
		require.False(t, ok, bad)
	}
}

func TestUUIDParse(t *testing.T) {
	t.Parallel()
	id := uuidv7.New()
	u, ok := parseUUID(id)
	require.True(t, ok)
	require.Equal(t, id, formatUUID(u.Bytes))
	for _, bad := range []string{"", "x", "0190a0a0-0000-7000-8000-00000000000g", "0190a0a000007000800000000000000000000"} {
		_, ok := parseUUID(bad)
		require.False(t, ok, bad)
	}
}
