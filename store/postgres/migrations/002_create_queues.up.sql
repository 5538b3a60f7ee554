-- Queues that have been paused or resumed. A queue with jobs needs no row here.
CREATE TABLE queues (
    name       text        PRIMARY KEY,
    paused     boolean     NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now()
);
