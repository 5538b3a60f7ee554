// Package pronto is a durable background-job queue for Go services, and for any language through the
// Open Job Spec (OJS) HTTP API.
//
// # The model
//
// A job is the OJS job model: a UUIDv7 id, a kind (the OJS "type", such as "email.send"), a queue, args
// as a JSON array, meta, a priority (higher runs first, -100 to 100), one of eight states (scheduled,
// available, pending, active, completed, retryable, cancelled, discarded), an attempt counter, an error
// history and a result. Typed Go args are stored as the one element of the args array, so a job
// inserted from Go can be worked by an OJS worker in another language, and the other way round.
//
// # Stores
//
// A Client works over a store: store/postgres for production (pgx v5, FOR UPDATE SKIP LOCKED claims,
// LISTEN/NOTIFY wake-ups, COPY bulk inserts, transactional inserts), store/sqlite for an embedded file
// with no server, and store/memory for tests and throwaway work.
//
// # Working jobs
//
// Define args with a Kind, a Worker for them, register it, and start a client:
//
//	type SendEmail struct{ To string `json:"to"` }
//	func (SendEmail) Kind() string { return "email.send" }
//
//	workers := pronto.NewWorkers()
//	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[SendEmail]) error {
//		return send(ctx, j.Args.To)
//	}))
//	client, err := pronto.NewClient(st, &pronto.Config{
//		Queues:  map[string]pronto.QueueConfig{pronto.DefaultQueue: {MaxWorkers: 50}},
//		Workers: workers,
//	})
//	err = client.Start(ctx)
//	job, err := client.Insert(ctx, SendEmail{To: "a@example.com"}, nil)
//
// A client claims only kinds it has workers for; a job of another kind waits in its queue for a client
// that can work it, and is never dropped.
//
// # Dispatch
//
// Pickup is pushed, not polled: every insert announces its queue once, and the producer of that queue
// on every client claims at once, as many jobs as it has free worker slots, in one statement. Jobs due
// later (scheduled, or retries after backoff) are claimed within milliseconds of their due time. A slow
// poll (PollInterval) only covers lost notifications.
//
// # Failure and recovery
//
// Retries are rows with a due time, so they survive restarts. A claimed job holds a lease its client
// extends with one heartbeat statement per interval; when a client dies, the elected leader returns its
// jobs to available within a few seconds, 3.5 s with the defaults even when the leader dies with it
// (Config.RecoveryBound). Stop shuts down
// gracefully: running jobs finish until Stop's deadline, then are cancelled and returned to available
// without spending an attempt.
package pronto
