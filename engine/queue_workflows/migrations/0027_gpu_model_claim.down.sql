DROP INDEX IF EXISTS workflow_node_jobs_model_claim_idx;
