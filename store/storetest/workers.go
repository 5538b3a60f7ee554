package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// testWorkers: worker records are created by the first touch, keep their first-seen time, move their
// last-seen time on, keep their queues unless a touch names some, carry a directive that touches
// return until cleared, and go when deleted or pruned.
func testWorkers(t *testing.T, s store.Store) {
	ws, ok := s.(store.WorkerStore)
	require.True(t, ok, "%T does not implement store.WorkerStore", s)
	c := ctx(t)
	list, err := ws.ListWorkers(c)
	require.NoError(t, err)
	require.Empty(t, list)
	_, err = ws.GetWorker(c, "w-none")
	require.ErrorIs(t, err, store.ErrNotFound)
	require.ErrorIs(t, ws.SetWorkerDirective(c, "w-none", store.WorkerQuiet), store.ErrNotFound)

	d, err := ws.TouchWorker(c, "w-b", []string{"email", "default"})
	require.NoError(t, err)
	require.Equal(t, "", d)
	b, err := ws.GetWorker(c, "w-b")
	require.NoError(t, err)
	require.Equal(t, []string{"email", "default"}, b.Queues)
	require.False(t, b.FirstSeenAt.IsZero())
	require.True(t, b.LastSeenAt.Equal(b.FirstSeenAt))
	require.Equal(t, "", b.Directive)
	require.True(t, b.DirectiveAt.IsZero())

	time.Sleep(2 * time.Millisecond) // the clocks count microseconds: let the next touch be later
	_, err = ws.TouchWorker(c, "w-b", nil)
	require.NoError(t, err)
	b2, err := ws.GetWorker(c, "w-b")
	require.NoError(t, err)
	require.Equal(t, []string{"email", "default"}, b2.Queues, "a touch without queues keeps them")
	require.True(t, b2.FirstSeenAt.Equal(b.FirstSeenAt))
	require.True(t, b2.LastSeenAt.After(b.LastSeenAt))

	_, err = ws.TouchWorker(c, "w-a", nil)
	require.NoError(t, err)
	list, err = ws.ListWorkers(c)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "w-a", list[0].ID)
	require.Empty(t, list[0].Queues)
	require.Equal(t, "w-b", list[1].ID)

	require.NoError(t, ws.SetWorkerDirective(c, "w-b", store.WorkerQuiet))
	d, err = ws.TouchWorker(c, "w-b", []string{"email"})
	require.NoError(t, err)
	require.Equal(t, store.WorkerQuiet, d)
	b, err = ws.GetWorker(c, "w-b")
	require.NoError(t, err)
	require.Equal(t, []string{"email"}, b.Queues)
	require.Equal(t, store.WorkerQuiet, b.Directive)
	require.False(t, b.DirectiveAt.IsZero())
	require.NoError(t, ws.SetWorkerDirective(c, "w-b", store.WorkerTerminate))
	d, err = ws.TouchWorker(c, "w-b", nil)
	require.NoError(t, err)
	require.Equal(t, store.WorkerTerminate, d)
	require.NoError(t, ws.SetWorkerDirective(c, "w-b", ""))
	b, err = ws.GetWorker(c, "w-b")
	require.NoError(t, err)
	require.Equal(t, "", b.Directive)
	require.True(t, b.DirectiveAt.IsZero())

	n, err := ws.PruneWorkers(c, b.LastSeenAt.Add(-time.Hour))
	require.NoError(t, err)
	require.Zero(t, n, "nobody was last seen an hour ago")
	n, err = ws.PruneWorkers(c, b.LastSeenAt.Add(time.Microsecond))
	require.NoError(t, err)
	require.Equal(t, 2, n)
	list, err = ws.ListWorkers(c)
	require.NoError(t, err)
	require.Empty(t, list)

	_, err = ws.TouchWorker(c, "w-c", nil)
	require.NoError(t, err)
	gone, err := ws.DeleteWorker(c, "w-c")
	require.NoError(t, err)
	require.True(t, gone)
	gone, err = ws.DeleteWorker(c, "w-c")
	require.NoError(t, err)
	require.False(t, gone)
}

// testSettings: a setting reads nil until set, reads back what was set (replaced by a later set),
// and goes when set to nil.
func testSettings(t *testing.T, s store.Store) {
	ss, ok := s.(store.SettingStore)
	require.True(t, ok, "%T does not implement store.SettingStore", s)
	c := ctx(t)
	v, err := ss.GetSetting(c, "maintenance")
	require.NoError(t, err)
	require.Nil(t, v)
	require.NoError(t, ss.SetSetting(c, "maintenance", json.RawMessage(`{"enabled":true,"queues":["a"]}`)))
	v, err = ss.GetSetting(c, "maintenance")
	require.NoError(t, err)
	require.JSONEq(t, `{"enabled":true,"queues":["a"]}`, string(v))
	require.NoError(t, ss.SetSetting(c, "maintenance", json.RawMessage(`{"enabled":false}`)))
	v, err = ss.GetSetting(c, "maintenance")
	require.NoError(t, err)
	require.JSONEq(t, `{"enabled":false}`, string(v))
	require.NoError(t, ss.SetSetting(c, "maintenance", nil))
	v, err = ss.GetSetting(c, "maintenance")
	require.NoError(t, err)
	require.Nil(t, v)
	require.NoError(t, ss.SetSetting(c, "never-set", nil), "removing what is not there is no error")
}
