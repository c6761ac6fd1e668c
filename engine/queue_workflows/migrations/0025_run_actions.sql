-- Who did what to a run, and when: every cancel, restart and input submission made through the
-- API, `qw run ...` or the dashboard appends a row. Pruned with its run (retention).
CREATE TABLE workflow_run_actions (
    id           bigserial PRIMARY KEY,
    run_id       bigint NOT NULL REFERENCES workflow_runs (id) ON DELETE CASCADE,
    action       text NOT NULL CHECK (action IN ('cancel', 'restart', 'input')),
    node_name    text,
    requested_by text,
    detail       text,
    at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX workflow_run_actions_run_idx ON workflow_run_actions (run_id, id);
