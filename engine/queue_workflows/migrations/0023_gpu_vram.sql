-- What each model needs (est_vram_gb from the registering gpu workers) and what each gpu worker
-- has, so a claim takes only what fits and the leader can flag a job nothing live can ever fit.
CREATE TABLE gpu_models (
    model_id    text PRIMARY KEY,
    est_vram_gb double precision CHECK (est_vram_gb >= 0),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE worker_heartbeats
    ADD COLUMN vram_total_gb double precision,
    ADD COLUMN vram_free_gb double precision;
ALTER TABLE workflow_node_jobs ADD COLUMN unassignable_reason text;
