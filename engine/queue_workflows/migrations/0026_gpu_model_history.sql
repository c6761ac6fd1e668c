-- A gpu claim's plan reads how long a model's recent jobs and loads took (gpu_claim_plan):
-- the last few finished jobs per model, found by index instead of a scan of the history.
CREATE INDEX workflow_node_jobs_model_hits_idx ON workflow_node_jobs (required_model, finished_at DESC) WHERE model_hit;
CREATE INDEX workflow_node_jobs_model_loads_idx ON workflow_node_jobs (required_model, finished_at DESC) WHERE NOT model_hit;
