-- A routed gpu claim (gpu_claim_plan) probes the queue per model: the distinct queued models,
-- each one's next job, and a holder's queue counted only as far as the routing rule needs.
-- This index makes each probe a few index pages, so the claim costs the same at 30 or 30,000
-- queued gpu jobs.
CREATE INDEX workflow_node_jobs_model_claim_idx ON workflow_node_jobs (queue, required_model, priority DESC, id)
 WHERE status = 'queued';
