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

func TestRemoteFetchAckNack(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c := startClient(t, ts.Store, &pronto.Config{})
		events, unsub := c.Subscribe(pronto.EventCompleted, pronto.EventFailed, pronto.EventDiscarded)
		defer unsub()

		rows, err := c.InsertOJS(ctx, []pronto.OJSJob{
			{Kind: "remote.first", Args: json.RawMessage(`[1]`), Opts: pronto.InsertOpts{Queue: "b"}},
			{Kind: "remote.second-hyphen", Args: json.RawMessage(`[2]`), Opts: pronto.InsertOpts{
				Queue: "a", RetryPolicy: &pronto.RetryPolicy{MaxAttempts: 2, InitialInterval: 10 * time.Millisecond, NoJitter: true},
			}},
		})
		require.NoError(t, err)

		// Queues are taken in the order given.
		got, err := c.RemoteFetch(ctx, pronto.RemoteFetchParams{Queues: []string{"a", "b"}, Limit: 1, WorkerID: "w1", Lease: time.Minute})
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Equal(t, rows[1].ID, got[0].ID)
		require.Equal(t, pronto.StateActive, got[0].State)
		require.Equal(t, 1, got[0].Attempt)

		// Another worker cannot finish it; the holder's heartbeat extends it.
		_, err = c.RemoteAck(ctx, pronto.RemoteAckParams{ID: got[0].ID, WorkerID: "w2"})
		require.ErrorIs(t, err, pronto.ErrInvalidTransition)
		lost, err := c.RemoteHeartbeat(ctx, "w1", []string{got[0].ID}, time.Minute)
		require.NoError(t, err)
		require.Empty(t, lost)
		lost, err = c.RemoteHeartbeat(ctx, "w2", []string{got[0].ID}, time.Minute)
		require.NoError(t, err)
		require.Equal(t, []string{got[0].ID}, lost)

		// A failure with attempts left is retried after the policy's backoff.
		res, err := c.RemoteNack(ctx, pronto.RemoteNackParams{ID: got[0].ID, WorkerID: "w1",
			Error: pronto.AttemptError{Type: "net.timeout", Message: "slow"}})
		require.NoError(t, err)
		require.Equal(t, pronto.StateRetryable, res.Job.State)
		require.Equal(t, 10*time.Millisecond, res.RetryDelay)
		ev := <-events
		require.Equal(t, pronto.EventFailed, ev.Kind)
		// The event's error history ends with this attempt's failure, with its start as the store records it.
		require.NotEmpty(t, ev.Job.Errors)
		firstStart := ev.Job.Errors[len(ev.Job.Errors)-1].StartedAt
		require.False(t, firstStart.IsZero(), "the failure carries its attempt's start")
		require.WithinDuration(t, got[0].StartedAt, firstStart, time.Millisecond)

		// The last attempt's failure discards it, with the whole history kept.
		time.Sleep(20 * time.Millisecond)
		got, err = c.RemoteFetch(ctx, pronto.RemoteFetchParams{Queues: []string{"a"}, WorkerID: "w1"})
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Equal(t, 2, got[0].Attempt)
		res, err = c.RemoteNack(ctx, pronto.RemoteNackParams{ID: got[0].ID, Error: pronto.AttemptError{Message: "again"}})
		require.NoError(t, err)
		require.Equal(t, pronto.StateDiscarded, res.Job.State)
		require.Equal(t, pronto.EventDiscarded, (<-events).Kind)
		j, err := c.JobGet(ctx, got[0].ID)
		require.NoError(t, err)
		require.Len(t, j.Errors, 2)
		require.Equal(t, "net.timeout", j.Errors[0].Type)
		require.WithinDuration(t, firstStart, j.Errors[0].StartedAt, time.Millisecond, "the stored start matches the event's")
		require.WithinDuration(t, got[0].StartedAt, j.Errors[1].StartedAt, time.Millisecond, "each attempt's own start")
		require.Equal(t, 2, j.Errors[1].Attempt)

		// Ack stores the result; a second ack is refused.
		got, err = c.RemoteFetch(ctx, pronto.RemoteFetchParams{Queues: []string{"b"}})
		require.NoError(t, err)
		require.Len(t, got, 1)
		done, err := c.RemoteAck(ctx, pronto.RemoteAckParams{ID: got[0].ID, Result: json.RawMessage(`{"ok":true}`)})
		require.NoError(t, err)
		require.Equal(t, pronto.StateCompleted, done.State)
		ev = <-events
		require.Equal(t, pronto.EventCompleted, ev.Kind)
		j, err = c.JobGet(ctx, got[0].ID)
		require.NoError(t, err)
		require.JSONEq(t, `{"ok":true}`, string(j.Result))
		_, err = c.RemoteAck(ctx, pronto.RemoteAckParams{ID: got[0].ID})
		var te *pronto.TransitionError
		require.True(t, errors.As(err, &te))
		require.Equal(t, pronto.StateCompleted, te.From)
	})
}

func TestRemoteNackRules(t *testing.T) {
	ctx := context.Background()
	ts := newTestStore(t, kindMemory)
	c := startClient(t, ts.Store, &pronto.Config{})
	insert := func(policy *pronto.RetryPolicy) string {
		rows, err := c.InsertOJS(ctx, []pronto.OJSJob{{Kind: "x.y", Args: json.RawMessage(`[]`), Opts: pronto.InsertOpts{RetryPolicy: policy}}})
		require.NoError(t, err)
		got, err := c.RemoteFetch(ctx, pronto.RemoteFetchParams{Queues: []string{"default"}})
		require.NoError(t, err)
		require.Len(t, got, 1)
		return rows[0].ID
	}
	// A type listed as non-retryable, exactly or by prefix, discards at once.
	id := insert(&pronto.RetryPolicy{MaxAttempts: 5, NonRetryableErrors: []string{"auth.*"}})
	res, err := c.RemoteNack(ctx, pronto.RemoteNackParams{ID: id, Error: pronto.AttemptError{Type: "auth.expired", Message: "m"}})
	require.NoError(t, err)
	require.Equal(t, pronto.StateDiscarded, res.Job.State)
	// So does an error the worker declares non-retryable.
	id = insert(&pronto.RetryPolicy{MaxAttempts: 5})
	res, err = c.RemoteNack(ctx, pronto.RemoteNackParams{ID: id, NonRetryable: true, Error: pronto.AttemptError{Message: "m"}})
	require.NoError(t, err)
	require.Equal(t, pronto.StateDiscarded, res.Job.State)
	// Requeue hands the job back without spending the attempt.
	id = insert(&pronto.RetryPolicy{MaxAttempts: 1})
	res, err = c.RemoteNack(ctx, pronto.RemoteNackParams{ID: id, Requeue: true})
	require.NoError(t, err)
	require.Equal(t, pronto.StateAvailable, res.Job.State)
	j, err := c.JobGet(ctx, id)
	require.NoError(t, err)
	require.Equal(t, pronto.StateAvailable, j.State)
	require.Equal(t, 2, j.MaxAttempts)
	require.Empty(t, j.Errors)

	// The fetched row may stand in for a read of the job; a job that moved on is still refused.
	rows, err := c.InsertOJS(ctx, []pronto.OJSJob{{Kind: "x.y", Args: json.RawMessage(`[]`), Opts: pronto.InsertOpts{Queue: "known"}}})
	require.NoError(t, err)
	got, err := c.RemoteFetch(ctx, pronto.RemoteFetchParams{Queues: []string{"known"}, WorkerID: "w"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	_, err = c.JobCancel(ctx, rows[0].ID)
	require.NoError(t, err)
	_, err = c.RemoteAck(ctx, pronto.RemoteAckParams{ID: rows[0].ID, WorkerID: "w", Job: got[0]})
	var te *pronto.TransitionError
	require.ErrorAs(t, err, &te)
	require.Equal(t, pronto.StateCancelled, te.From)
	rows, err = c.InsertOJS(ctx, []pronto.OJSJob{{Kind: "x.y", Args: json.RawMessage(`[]`), Opts: pronto.InsertOpts{Queue: "known"}}})
	require.NoError(t, err)
	got, err = c.RemoteFetch(ctx, pronto.RemoteFetchParams{Queues: []string{"known"}, WorkerID: "w"})
	require.NoError(t, err)
	done, err := c.RemoteAck(ctx, pronto.RemoteAckParams{ID: rows[0].ID, WorkerID: "w", Job: got[0]})
	require.NoError(t, err)
	require.Equal(t, pronto.StateCompleted, done.State)

	require.True(t, pronto.MatchesErrorType([]string{"a.b"}, "a.b"))
	require.True(t, pronto.MatchesErrorType([]string{"Auth.*"}, "Auth.TokenExpired"))
	require.False(t, pronto.MatchesErrorType([]string{"auth.*"}, "external.auth.x"))
	require.False(t, pronto.MatchesErrorType([]string{"a"}, ""))

	_, err = c.RemoteFetch(ctx, pronto.RemoteFetchParams{})
	require.ErrorIs(t, err, pronto.ErrInvalidArgs)
	_, err = c.RemoteFetch(ctx, pronto.RemoteFetchParams{Queues: []string{"Bad"}})
	require.ErrorIs(t, err, pronto.ErrInvalidArgs)
	_, err = c.RemoteAck(ctx, pronto.RemoteAckParams{ID: "019539a4-0000-7000-8000-000000000000"})
	require.ErrorIs(t, err, pronto.ErrNotFound)
}

func TestValidOJSType(t *testing.T) {
	for typ, ok := range map[string]bool{
		"email.send": true, "dlq.test.manual-retry": true, "a_b.c-d": true,
		"Email.Send": false, "1email": false, "email send": false, "": false, "a..b": false, "-a": false,
		"a.": false, ".a": false, "a.1b": false, "email@send!": false,
	} {
		require.Equal(t, ok, pronto.ValidOJSType(typ), typ)
	}
}
