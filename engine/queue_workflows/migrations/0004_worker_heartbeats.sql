-- One row per live worker process. lock_key is the advisory lock its session holds
-- for its whole life; Postgres releases it the moment that connection drops.
-- No index beyond the key: the table holds one row per worker, and an index on
-- last_seen would turn every heartbeat into a non-HOT update.
CREATE SEQUENCE worker_lock_key_seq AS integer MINVALUE 1 CYCLE;

CREATE TABLE worker_heartbeats (
    worker_id      text PRIMARY KEY,
    host_label     text NOT NULL,
    queue          text NOT NULL,
    pid            integer NOT NULL,
    lock_key       integer NOT NULL,
    state          text NOT NULL DEFAULT 'idle' CHECK (state IN ('idle', 'busy', 'stopping')),
    current_job_id bigint,
    started_at     timestamptz NOT NULL DEFAULT now(),
    last_seen      timestamptz NOT NULL DEFAULT now()
);
