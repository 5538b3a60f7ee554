-- The hand-off (store/postgres/handoff.go): producers waiting with free worker slots, which a single
-- insert claims its job for in its own transaction. A row lives a few seconds (expires_at), so the
-- table is unlogged: a database crash empties it, and the next claims advertise again.
CREATE UNLOGGED TABLE {schema}.waiters (
	id text PRIMARY KEY,
	queue text NOT NULL,
	-- channel is the waiting process's hand-off channel: the notification carries the claimed job.
	channel text NOT NULL,
	-- listener_pid is the backend of the connection listening on channel: an insert hands nothing to
	-- a producer whose listener is gone (its process killed), without waiting for expires_at.
	listener_pid integer NOT NULL,
	worker_id text NOT NULL,
	-- kinds are the kinds the producer works; NULL for every kind.
	kinds text[],
	lease_us bigint NOT NULL,
	-- free counts the slots the insert may still fill; each hand-off takes one.
	free integer NOT NULL,
	expires_at timestamptz NOT NULL
);
CREATE INDEX waiters_queue_idx ON {schema}.waiters (queue, expires_at);
