-- The latest hw-metrics snapshot of each host, for whoever joins after the last NOTIFY
-- (a dashboard, `qw`): the hw-metrics sidecar upserts its host's row every sample. The
-- payload is the full snapshot (docs/metrics.md); the NOTIFY may carry a trimmed one.
CREATE TABLE host_metrics (
    host_label     text PRIMARY KEY,
    payload_version integer NOT NULL,
    payload        jsonb NOT NULL,
    sampled_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- The sidecar's job outcome counters read node jobs by the time they finished; retention's
-- index (0019) covers only run-less nodes.
CREATE INDEX workflow_node_jobs_outcome_idx ON workflow_node_jobs (finished_at)
    WHERE status IN ('completed', 'failed', 'cancelled');
