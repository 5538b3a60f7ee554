-- The registry of live clients (store.ClientRegistry): each started client rewrites its row every
-- few seconds; a row past expires_at is a client gone. Times are Unix microseconds.
CREATE TABLE pronto_clients (
    id         TEXT    PRIMARY KEY,
    host       TEXT    NOT NULL DEFAULT '',
    pid        INTEGER NOT NULL DEFAULT 0,
    version    TEXT    NOT NULL DEFAULT '',
    queues     TEXT    NOT NULL DEFAULT '[]',
    started_at INTEGER NOT NULL,
    seen_at    INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
