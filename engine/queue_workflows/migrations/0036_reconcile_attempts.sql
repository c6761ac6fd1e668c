-- The reconcile sweep's retries of a run it could not advance, kept on the run: a leader change
-- or a restart must neither forget how often it failed nor retry it sooner than its backoff.
ALTER TABLE workflow_runs
    ADD COLUMN reconcile_attempts integer NOT NULL DEFAULT 0,
    ADD COLUMN reconcile_next_at  timestamptz;
