-- Leadership leases: one row per elected role, held until expires_at unless renewed.
CREATE TABLE leader (
    name       text        PRIMARY KEY,
    leader_id  text        NOT NULL,
    elected_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
