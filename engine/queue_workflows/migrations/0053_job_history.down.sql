-- Rolls 0053 back: every moved row goes back to its hot table (whole, same id), then the history
-- objects go. A node row whose run retention already deleted goes with it, as it would have.
-- The insert-time markers are off while rows come back, so no job gains an event it already has.
ALTER TABLE workflow_node_jobs DISABLE TRIGGER workflow_node_jobs_record_marker;
INSERT INTO ingest_jobs SELECT * FROM ingest_jobs_history;
INSERT INTO workflow_node_jobs
SELECT h.* FROM workflow_node_jobs_history AS h
 WHERE h.run_id IS NULL OR EXISTS (SELECT FROM workflow_runs AS r WHERE r.id = h.run_id);
ALTER TABLE workflow_node_jobs ENABLE TRIGGER workflow_node_jobs_record_marker;

CREATE OR REPLACE FUNCTION qw_gpu_learn() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    task_of text := qw_gpu_task(NEW.node_module, NEW.node_name);
    win record;
BEGIN
    SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY w.per_device_bytes) / 2^30 AS p95, count(*) AS n, min(w.finished_at) AS oldest
      INTO win
      FROM (SELECT j.peak_vram_bytes / greatest(j.gpus, 1) AS per_device_bytes, j.finished_at FROM workflow_node_jobs AS j
             WHERE j.required_model = NEW.required_model AND qw_gpu_task(j.node_module, j.node_name) = task_of
               AND j.status = 'completed' AND j.peak_vram_bytes IS NOT NULL
             ORDER BY j.finished_at DESC LIMIT 50) AS w;
    INSERT INTO gpu_task_vram AS t (model_id, task, p95_gb, samples, oldest_at)
    VALUES (NEW.required_model, task_of, win.p95, win.n, win.oldest)
    ON CONFLICT (model_id, task) DO UPDATE
       SET p95_gb = EXCLUDED.p95_gb, samples = EXCLUDED.samples, oldest_at = EXCLUDED.oldest_at, updated_at = now();
    INSERT INTO gpu_models AS m (model_id, learned_vram_gb, learned_samples)
    SELECT NEW.required_model, max(t.p95_gb) FILTER (WHERE t.samples >= 5), sum(t.samples)
      FROM gpu_task_vram AS t WHERE t.model_id = NEW.required_model
    ON CONFLICT (model_id) DO UPDATE
       SET learned_vram_gb = EXCLUDED.learned_vram_gb, learned_samples = EXCLUDED.learned_samples,
           oom_need_gb = CASE WHEN win.n >= 50 AND win.oldest > m.oom_at THEN NULL ELSE m.oom_need_gb END,
           oom_at = CASE WHEN win.n >= 50 AND win.oldest > m.oom_at THEN NULL ELSE m.oom_at END,
           updated_at = now();
    RETURN NULL;
END $$;

CREATE OR REPLACE VIEW node_events AS
SELECT e.id, j.run_id, j.node_name, e.job_id, e.from_status, e.to_status, e.attempts, e.worker_id, e.error, e.at
  FROM job_events e
  JOIN workflow_node_jobs j ON e.job_table = 'workflow_node_jobs' AND j.id = e.job_id
 WHERE j.run_id IS NOT NULL;

DROP FUNCTION qw_history_drop_before(timestamptz, integer);
DROP FUNCTION qw_history_ensure_partitions(date, date);
DROP VIEW workflow_node_jobs_all;
DROP VIEW ingest_jobs_all;
DROP TABLE workflow_node_jobs_history;
DROP TABLE ingest_jobs_history;
