-- The registry of live clients (store.ClientRegistry): each started client rewrites its row every
-- few seconds; a row past expires_at is a client gone.
CREATE TABLE {schema}.clients (
    id         text        PRIMARY KEY,
    host       text        NOT NULL DEFAULT '',
    pid        integer     NOT NULL DEFAULT 0,
    version    text        NOT NULL DEFAULT '',
    queues     jsonb       NOT NULL DEFAULT '[]',
    started_at timestamptz NOT NULL,
    seen_at    timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
