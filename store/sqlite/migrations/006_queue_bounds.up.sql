-- Backpressure (ojs-backpressure.md): a queue's maximum depth (non-terminal jobs). A queue without
-- a row is unbounded.
CREATE TABLE pronto_queue_bounds (
    name      TEXT PRIMARY KEY,
    max_depth INTEGER NOT NULL CHECK (max_depth > 0)
);
