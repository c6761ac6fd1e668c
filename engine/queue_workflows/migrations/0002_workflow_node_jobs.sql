-- DAG node jobs on the reserved cpu/gpu queues. claim_lock_key names the advisory
-- lock the claiming worker's session holds, so a dropped connection frees the job.
CREATE TABLE workflow_node_jobs (
    id               bigserial PRIMARY KEY,
    run_id           bigint REFERENCES workflow_runs (id) ON DELETE CASCADE,
    node_name        text NOT NULL,
    node_module      text,
    queue            text NOT NULL CHECK (queue IN ('cpu', 'gpu')),
    status           text NOT NULL DEFAULT 'queued'
                     CHECK (status IN ('queued', 'running', 'awaiting_input', 'completed', 'failed', 'cancelled')),
    priority         integer NOT NULL DEFAULT 0,
    required_model   text,
    inputs           jsonb NOT NULL DEFAULT '{}'::jsonb,
    context_delta    jsonb,
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

CREATE INDEX workflow_node_jobs_claim_idx ON workflow_node_jobs (queue, priority DESC, id) WHERE status = 'queued';
CREATE INDEX workflow_node_jobs_running_idx ON workflow_node_jobs (lease_expires_at) WHERE status = 'running';
CREATE INDEX workflow_node_jobs_run_idx ON workflow_node_jobs (run_id);
