-- Standalone jobs on host-defined queues; queue and task names are validated host-side.
CREATE TABLE ingest_jobs (
    id               bigserial PRIMARY KEY,
    task_name        text NOT NULL,
    queue            text NOT NULL,
    args             jsonb NOT NULL DEFAULT '{}'::jsonb,
    reason           text NOT NULL DEFAULT 'manual',
    status           text NOT NULL DEFAULT 'queued'
                     CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
    priority         integer NOT NULL DEFAULT 0,
    result           jsonb,
    error            text,
    attempts         integer NOT NULL DEFAULT 0,
    run_after        timestamptz NOT NULL DEFAULT now(),
    max_attempts     integer NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
    claimed_by       text,
    claim_lock_key   integer,
    lease_expires_at timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz
);

CREATE INDEX ingest_jobs_claim_idx ON ingest_jobs (queue, priority DESC, id) WHERE status = 'queued';
CREATE INDEX ingest_jobs_running_idx ON ingest_jobs (lease_expires_at) WHERE status = 'running';
