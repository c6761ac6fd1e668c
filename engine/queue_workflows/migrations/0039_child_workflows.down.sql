DROP TRIGGER IF EXISTS workflow_node_jobs_parent_node_ended ON workflow_node_jobs;
DROP FUNCTION IF EXISTS qw_parent_node_ended();
DROP TRIGGER IF EXISTS workflow_runs_child_ended ON workflow_runs;
DROP FUNCTION IF EXISTS qw_child_run_ended();
DROP FUNCTION IF EXISTS qw_child_output(bigint, jsonb);
DROP INDEX IF EXISTS workflow_runs_parent_node_key;
ALTER TABLE workflow_runs
    DROP CONSTRAINT IF EXISTS workflow_runs_parent_pair,
    DROP COLUMN IF EXISTS depth,
    DROP COLUMN IF EXISTS parent_node,
    DROP COLUMN IF EXISTS parent_run_id;
