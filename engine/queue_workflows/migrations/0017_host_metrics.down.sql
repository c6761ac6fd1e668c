DROP INDEX IF EXISTS workflow_node_jobs_outcome_idx;
DROP TABLE IF EXISTS host_metrics;
