-- Several jobs per GPU and multi-GPU jobs (docs/gpu.md, "Several jobs per GPU"): a gpu claim
-- reserves VRAM on `gpus` devices of its worker at once, and the reservation is the running row
-- itself (gpu_devices, vram_reserved_gb on each), so every way out of `running` (completion,
-- failure, retry, reclaim after kill -9, cancel) frees it once, with no release code of its own.
ALTER TABLE workflow_node_jobs
    ADD COLUMN vram_gb double precision CONSTRAINT workflow_node_jobs_vram_gb_range CHECK (vram_gb >= 0 AND vram_gb <= 100000),
    ADD COLUMN gpus integer NOT NULL DEFAULT 1 CONSTRAINT workflow_node_jobs_gpus_range CHECK (gpus BETWEEN 1 AND 64),
    ADD COLUMN gpu_devices text[],
    ADD COLUMN vram_reserved_gb double precision;

-- A claim sums one device's running reservations: an index probe over the running rows only.
CREATE INDEX workflow_node_jobs_gpu_devices_idx ON workflow_node_jobs USING gin (gpu_devices) WHERE status = 'running' AND gpu_devices IS NOT NULL;

-- Each gpu worker's devices, [{"uuid", "total_gb", "free_gb"}], refreshed by every heartbeat:
-- they live and die with the worker's liveness row, so no separate table needs sweeping.
ALTER TABLE worker_heartbeats ADD COLUMN gpu_devices jsonb;

-- What a model needs on a device, in GB; NULL when unknown. Its own function so that a learned
-- peak can replace the declared estimate without touching the claim.
CREATE OR REPLACE FUNCTION qw_gpu_need_gb(model text) RETURNS double precision
LANGUAGE sql STABLE AS $$
    SELECT g.est_vram_gb FROM gpu_models AS g WHERE g.model_id = model
$$;

-- A job's need: its model's plus its own working memory (vram_gb); a job with no model needs its
-- own alone. NULL: unknown (a model with no estimate, or neither a model nor vram_gb).
CREATE OR REPLACE FUNCTION qw_gpu_job_need_gb(model text, own_gb double precision) RETURNS double precision
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN model IS NULL THEN own_gb ELSE qw_gpu_need_gb(model) + coalesce(own_gb, 0) END
$$;
