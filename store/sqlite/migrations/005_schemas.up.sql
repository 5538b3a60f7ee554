-- The OJS schema registry: a JSON Schema per job type and version, keyed by its URI. version is
-- the JSON text the client sent (1 or "1.0.0"); created_at is unix microseconds.
CREATE TABLE pronto_schemas (
    uri        TEXT PRIMARY KEY,
    kind       TEXT NOT NULL,
    version    TEXT NOT NULL,
    body       TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
