CREATE TABLE workflow_runs (
    id            bigserial PRIMARY KEY,
    workflow_name text NOT NULL,
    status        text NOT NULL DEFAULT 'queued'
                  CHECK (status IN ('queued', 'running', 'awaiting_input', 'completed', 'failed', 'cancelled')),
    params        jsonb NOT NULL DEFAULT '{}'::jsonb,
    context       jsonb NOT NULL DEFAULT '{}'::jsonb,
    parcel_id     text,
    error         text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz
);

CREATE INDEX workflow_runs_active_idx ON workflow_runs (status) WHERE status IN ('queued', 'running', 'awaiting_input');
