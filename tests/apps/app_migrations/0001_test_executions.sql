-- The test app's own chain (run beside the engine's, with its own ledger):
-- one row per time a task body actually ran, to count executions per job.
CREATE TABLE test_executions (
    id         bigserial PRIMARY KEY,
    token      text NOT NULL,
    worker_pid integer NOT NULL,
    ran_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX test_executions_token_idx ON test_executions (token);
