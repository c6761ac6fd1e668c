-- The scheduler's ledger: one row per (entry, slot) it enqueued, written in the same
-- transaction as the job. The primary key, not a read-then-write, is what makes several
-- scheduler replicas enqueue each slot exactly once: the loser of a race waits on the
-- winner's uncommitted row, then inserts nothing (or inserts after all, if the winner died).
-- A boot kick is a row of kind 'boot' at the instant it ran.
CREATE TABLE schedule_slots (
    entry_name  text NOT NULL,
    slot_time   timestamptz NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('slot', 'catch_up', 'boot')),
    task_name   text NOT NULL,
    queue       text NOT NULL,
    job_id      bigint,            -- ingest_jobs.id; no foreign key, so pruning jobs never blocks
    enqueued_by text NOT NULL,     -- the scheduler replica, host:pid
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (entry_name, slot_time)
);
