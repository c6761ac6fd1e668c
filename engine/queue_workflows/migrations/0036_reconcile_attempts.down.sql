ALTER TABLE workflow_runs
    DROP COLUMN IF EXISTS reconcile_next_at,
    DROP COLUMN IF EXISTS reconcile_attempts;
