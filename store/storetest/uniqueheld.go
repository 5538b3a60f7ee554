package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// held asks s which of refs are held now; s must implement store.UniqueHolder.
func held(t testing.TB, s store.Store, refs ...store.UniqueKeyRef) map[store.UniqueKeyRef]string {
	t.Helper()
	m, err := s.(store.UniqueHolder).HeldUniqueKeys(ctx(t), refs)
	require.NoError(t, err)
	require.NotNil(t, m)
	return m
}

// testUniqueHeldKeys: HeldUniqueKeys names, for each key held now, the job an Insert with that key
// would meet: a job with the key in one of its own UniqueStates and before its UniqueUntil. A store
// may hold keys per queue (Redis), so every ref names the queue of its holder; nothing is asserted of
// a ref naming another queue.
func testUniqueHeldKeys(t *testing.T, s store.Store) {
	if _, ok := s.(store.UniqueHolder); !ok {
		t.Skipf("%T does not implement store.UniqueHolder", s)
	}
	q := uniq("unique-held")
	ref := func(key string) store.UniqueKeyRef { return store.UniqueKeyRef{Queue: q, Key: key} }

	// Nothing asked, nothing held.
	require.Empty(t, held(t, s))
	require.Empty(t, held(t, s, []store.UniqueKeyRef{}...))

	// A held key names its holder; a key nobody took is absent.
	key, free := uniq("key"), uniq("free")
	h := insert(t, s, uniqueJob(q, key, ""))[0]
	require.Equal(t, map[store.UniqueKeyRef]string{ref(key): h.ID}, held(t, s, ref(key), ref(free)))

	// The holder of the key is the job an insert meets, through its states: held while active,
	// free once it finishes outside its UniqueStates.
	p := uniqueJob(q, uniq("key"), "")
	p.UniqueStates = []store.State{store.StateAvailable, store.StateActive}
	a := active(t, s, p)
	require.Equal(t, a.ID, held(t, s, ref(p.UniqueKey))[ref(p.UniqueKey)], "held while active")
	require.True(t, finish(t, s, store.Completion{ID: a.ID, Attempt: a.Attempt, Token: a.ClaimToken, State: store.StateCompleted}))
	require.Empty(t, held(t, s, ref(p.UniqueKey)), "completed is not among its states: the key is free")
	insert(t, s, uniqueJob(q, p.UniqueKey, store.ConflictReject)) // as an insert finds it

	// A holder whose states include completed still holds its key once completed.
	pc := uniqueJob(q, uniq("key"), "")
	pc.UniqueStates = []store.State{store.StateAvailable, store.StateActive, store.StateCompleted}
	c := active(t, s, pc)
	require.True(t, finish(t, s, store.Completion{ID: c.ID, Attempt: c.Attempt, Token: c.ClaimToken, State: store.StateCompleted}))
	require.Equal(t, c.ID, held(t, s, ref(pc.UniqueKey))[ref(pc.UniqueKey)], "completed is among its states")

	// A job cancelled while queued gives its key up.
	kc := uniqueJob(q, uniq("key"), "")
	insert(t, s, kc)
	_, err := s.CancelJob(ctx(t), kc.ID)
	require.NoError(t, err)
	require.Empty(t, held(t, s, ref(kc.UniqueKey)))

	// A job inserted outside its own states holds nothing.
	out := uniqueJob(q, uniq("key"), "")
	out.UniqueStates = []store.State{store.StateAvailable}
	out.State, out.ScheduledAt = store.StateScheduled, time.Now().Add(time.Hour)
	insert(t, s, out)
	require.Empty(t, held(t, s, ref(out.UniqueKey)), "scheduled is not among its states")

	// A key is held until UniqueUntil, whatever the holder's state.
	lapsing := uniqueJob(q, uniq("key"), "")
	lapsing.UniqueUntil = time.Now().Add(300 * time.Millisecond).Truncate(time.Millisecond)
	insert(t, s, lapsing)
	got := held(t, s, ref(lapsing.UniqueKey))
	if time.Now().Before(lapsing.UniqueUntil.Add(-50 * time.Millisecond)) {
		require.Equal(t, lapsing.ID, got[ref(lapsing.UniqueKey)], "held before UniqueUntil")
	}
	eventually(t, "the key's period to run out", func() bool { return len(held(t, s, ref(lapsing.UniqueKey))) == 0 })
	require.False(t, time.Now().Before(lapsing.UniqueUntil.Add(-precision)), "the key was held until UniqueUntil")
	require.Equal(t, store.StateAvailable, get(t, s, lapsing.ID).State, "asking changes nothing")

	// Many keys in one call: exactly the held ones, each with its own holder, a key asked twice once.
	const n = 60
	var ps []*store.InsertParams
	var refs []store.UniqueKeyRef
	want := map[store.UniqueKeyRef]string{}
	for range n {
		p := uniqueJob(q, uniq("many"), "")
		ps = append(ps, p)
		refs = append(refs, ref(p.UniqueKey), ref(uniq("free")))
		want[ref(p.UniqueKey)] = p.ID
	}
	insert(t, s, ps...)
	refs = append(refs, ref(ps[0].UniqueKey))
	require.Equal(t, want, held(t, s, refs...))
}
