-- Backpressure (ojs-backpressure.md): a queue's maximum depth (non-terminal jobs). A queue without
-- a row is unbounded.
CREATE TABLE {schema}.queue_bounds (
    name      text   PRIMARY KEY,
    max_depth bigint NOT NULL CHECK (max_depth > 0)
);
