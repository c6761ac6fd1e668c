DROP INDEX IF EXISTS workflow_node_jobs_model_loads_idx;
DROP INDEX IF EXISTS workflow_node_jobs_model_hits_idx;
