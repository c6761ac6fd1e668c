DROP TRIGGER workflow_node_jobs_gpu_learn ON workflow_node_jobs;
DROP FUNCTION qw_gpu_learn();
-- Back to the declared estimate alone (migration 0043's definition).
CREATE OR REPLACE FUNCTION qw_gpu_need_gb(model text) RETURNS double precision LANGUAGE sql STABLE AS $$
    SELECT m.est_vram_gb FROM gpu_models AS m WHERE m.model_id = model
$$;
DROP INDEX workflow_node_jobs_vram_samples_idx;
DROP TABLE gpu_task_vram;
DROP FUNCTION qw_gpu_task(text, text);
ALTER TABLE ingest_jobs DROP COLUMN oom_requeued;
ALTER TABLE workflow_node_jobs DROP COLUMN oom_requeued;
ALTER TABLE gpu_models DROP COLUMN oom_at, DROP COLUMN oom_need_gb, DROP COLUMN learned_samples, DROP COLUMN learned_vram_gb;
