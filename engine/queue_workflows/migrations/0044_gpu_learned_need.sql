-- Learned VRAM need (docs/gpu.md, "Learned VRAM need and OOM requeue"): per (task, model) the p95 of
-- the last 50 completed jobs' peak_vram_bytes, kept on the model's row as the highest over its
-- tasks, refreshed as each job completes; an out-of-memory raises the model's need, and requeues
-- its job once without charging an attempt (oom_requeued marks the row so a second OOM fails it).
ALTER TABLE gpu_models
    ADD COLUMN learned_vram_gb double precision CHECK (learned_vram_gb >= 0),
    ADD COLUMN learned_samples integer NOT NULL DEFAULT 0,
    ADD COLUMN oom_need_gb double precision CHECK (oom_need_gb >= 0),
    ADD COLUMN oom_at timestamptz;
ALTER TABLE workflow_node_jobs ADD COLUMN oom_requeued boolean NOT NULL DEFAULT false;
ALTER TABLE ingest_jobs ADD COLUMN oom_requeued boolean NOT NULL DEFAULT false;

-- A node job's task: its module and name (a DAG node's callable), or its name alone.
CREATE FUNCTION qw_gpu_task(node_module text, node_name text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(node_module || '/', '') || node_name
$$;

-- Per (model, task): the window's p95 in GiB, its size, and when its oldest job finished.
CREATE TABLE gpu_task_vram (
    model_id   text NOT NULL,
    task       text NOT NULL,
    p95_gb     double precision NOT NULL,
    samples    integer NOT NULL,
    oldest_at  timestamptz NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model_id, task)
);

-- A task's window is one index probe: its completed, measured jobs, newest first.
CREATE INDEX workflow_node_jobs_vram_samples_idx ON workflow_node_jobs (required_model, qw_gpu_task(node_module, node_name), finished_at DESC)
    WHERE status = 'completed' AND peak_vram_bytes IS NOT NULL;

-- The need that routing and admission use: the learned figure once some task of the model has 5
-- samples, else the declared estimate, raised to what an out-of-memory showed; NULL when unknown.
CREATE OR REPLACE FUNCTION qw_gpu_need_gb(model text) RETURNS double precision LANGUAGE sql STABLE AS $$
    SELECT greatest(coalesce(m.learned_vram_gb, m.est_vram_gb), m.oom_need_gb) FROM gpu_models AS m WHERE m.model_id = model
$$;

-- Runs as a measured job completes (the worker's record_usage then mark, one transaction). An OOM's
-- raise is dropped once a task's full window ran entirely after it: those 50 jobs are the evidence.
CREATE FUNCTION qw_gpu_learn() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    task_of text := qw_gpu_task(NEW.node_module, NEW.node_name);
    win record;
BEGIN
    SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY w.peak_vram_bytes) / 2^30 AS p95, count(*) AS n, min(w.finished_at) AS oldest
      INTO win
      FROM (SELECT j.peak_vram_bytes, j.finished_at FROM workflow_node_jobs AS j
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
END
$$;
CREATE TRIGGER workflow_node_jobs_gpu_learn AFTER UPDATE OF status ON workflow_node_jobs
    FOR EACH ROW WHEN (NEW.status = 'completed' AND OLD.status <> 'completed' AND NEW.required_model IS NOT NULL AND NEW.peak_vram_bytes IS NOT NULL)
    EXECUTE FUNCTION qw_gpu_learn();

