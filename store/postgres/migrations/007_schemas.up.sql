-- The OJS schema registry: a JSON Schema per job type and version, keyed by its URI. version is
-- the JSON text the client sent (1 or "1.0.0"); body is kept as text, byte for byte.
CREATE TABLE {schema}.schemas (
    uri        text PRIMARY KEY,
    kind       text NOT NULL,
    version    text NOT NULL,
    body       text NOT NULL,
    created_at timestamptz NOT NULL
);
