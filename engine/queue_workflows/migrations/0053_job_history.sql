-- Finished jobs leave the hot tables (docs/throughput.md, "Finished jobs: time-partitioned history").
-- The leader moves terminal rows into these tables in small batches (queue_workflows.leader.history),
-- so claims, sweeps and vacuum on the hot tables only ever walk live work, and retention drops a
-- whole day's partition instead of deleting rows. Each history table has exactly its hot table's
-- columns in the same order (INSERT ... SELECT * moves a row whole); nothing heavy happens here:
-- existing finished rows are moved online by the same mover, batch by batch.
CREATE TABLE ingest_jobs_history (LIKE ingest_jobs) PARTITION BY RANGE (finished_at);
CREATE TABLE workflow_node_jobs_history (LIKE workflow_node_jobs) PARTITION BY RANGE (finished_at);
-- A row of a day with no partition (one made before its day's partition, or no finished_at) lands here.
CREATE TABLE ingest_jobs_history_default PARTITION OF ingest_jobs_history DEFAULT;
CREATE TABLE workflow_node_jobs_history_default PARTITION OF workflow_node_jobs_history DEFAULT;

CREATE INDEX ingest_jobs_history_id_idx ON ingest_jobs_history (id);
CREATE INDEX ingest_jobs_history_finished_idx ON ingest_jobs_history (finished_at);
-- Dedup spans jobs finished within QW_DEDUP_WINDOW_SECONDS (jobs.sql, enqueue_ingest_job_once).
CREATE INDEX ingest_jobs_history_dedup_idx ON ingest_jobs_history (dedup_key, finished_at) WHERE dedup_key IS NOT NULL;
CREATE INDEX workflow_node_jobs_history_id_idx ON workflow_node_jobs_history (id);
CREATE INDEX workflow_node_jobs_history_finished_idx ON workflow_node_jobs_history (finished_at);
CREATE INDEX workflow_node_jobs_history_run_idx ON workflow_node_jobs_history (run_id) WHERE run_id IS NOT NULL;
-- The VRAM learner's last completed samples per (model, task), as workflow_node_jobs_vram_samples_idx.
CREATE INDEX workflow_node_jobs_history_vram_idx ON workflow_node_jobs_history
    (required_model, qw_gpu_task(node_module, node_name), finished_at DESC)
    WHERE status = 'completed' AND peak_vram_bytes IS NOT NULL;
-- The GPU claim plan's recent job and load times per model, as workflow_node_jobs_model_hits/loads_idx.
CREATE INDEX workflow_node_jobs_history_model_hits_idx ON workflow_node_jobs_history (required_model, finished_at DESC) WHERE model_hit;
CREATE INDEX workflow_node_jobs_history_model_loads_idx ON workflow_node_jobs_history (required_model, finished_at DESC) WHERE NOT model_hit;

-- Readers that must see a job wherever it lives read these: one snapshot sees a moved row once.
CREATE VIEW ingest_jobs_all AS SELECT * FROM ingest_jobs UNION ALL SELECT * FROM ingest_jobs_history;
CREATE VIEW workflow_node_jobs_all AS SELECT * FROM workflow_node_jobs UNION ALL SELECT * FROM workflow_node_jobs_history;

GRANT SELECT ON ingest_jobs_history, workflow_node_jobs_history, ingest_jobs_all, workflow_node_jobs_all
    TO qw_worker, qw_orchestrator, qw_scheduler, qw_dashboard, qw_metrics;
-- The mover (orchestrator) and an operator's retry, which brings a finished job back (dashboard).
GRANT INSERT, DELETE ON ingest_jobs_history, workflow_node_jobs_history TO qw_orchestrator, qw_dashboard;

-- Day partitions from p_from to p_to (UTC days), for both tables; the leader calls it before moving.
-- SECURITY DEFINER: the orchestrator creates no tables of its own, and partitions stay the owner's.
CREATE FUNCTION qw_history_ensure_partitions(p_from date, p_to date) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET lock_timeout = '2s' AS $$
DECLARE
    d date;
    t text;
    made integer := 0;
BEGIN
    FOR d IN SELECT generate_series(p_from, p_to, interval '1 day')::date LOOP
        FOREACH t IN ARRAY ARRAY['ingest_jobs_history', 'workflow_node_jobs_history'] LOOP
            CONTINUE WHEN to_regclass(t || '_p' || to_char(d, 'YYYYMMDD')) IS NOT NULL;
            BEGIN
                EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                               t || '_p' || to_char(d, 'YYYYMMDD'), t,
                               (d::timestamp AT TIME ZONE 'UTC'), ((d + 1)::timestamp AT TIME ZONE 'UTC'));
                made := made + 1;
            EXCEPTION WHEN check_violation OR lock_not_available THEN
                -- Rows of that day already sit in the default partition; they stay there until retention.
                RAISE WARNING 'history partition %_p% not made: %', t, to_char(d, 'YYYYMMDD'), SQLERRM;
            END;
        END LOOP;
    END LOOP;
    RETURN made;
END $$;

-- Drops every day partition whose whole day ends at or before p_before, and deletes (a batch of)
-- the default partition's rows older than it; the number of partitions dropped.
CREATE FUNCTION qw_history_drop_before(p_before timestamptz, p_batch integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET lock_timeout = '2s' AS $$
DECLARE
    part record;
    dropped integer := 0;
BEGIN
    FOR part IN
        SELECT c.relname
          FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent IN ('ingest_jobs_history'::regclass, 'workflow_node_jobs_history'::regclass)
           AND c.relname ~ '_p[0-9]{8}$'
           AND (to_date(right(c.relname, 8), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC' <= p_before
         ORDER BY c.relname
    LOOP
        BEGIN
            EXECUTE format('DROP TABLE %I', part.relname);
            dropped := dropped + 1;
        EXCEPTION WHEN lock_not_available THEN
            -- A reader holds it: the next step tries again, rather than queue readers behind more drops now.
            RAISE WARNING 'history partition % not dropped now (busy): %', part.relname, SQLERRM;
            EXIT;
        END;
    END LOOP;
    DELETE FROM ingest_jobs_history_default WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM ingest_jobs_history_default WHERE finished_at < p_before OR finished_at IS NULL LIMIT p_batch));
    DELETE FROM workflow_node_jobs_history_default WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM workflow_node_jobs_history_default WHERE finished_at < p_before OR finished_at IS NULL LIMIT p_batch));
    RETURN dropped;
END $$;

REVOKE ALL ON FUNCTION qw_history_ensure_partitions(date, date), qw_history_drop_before(timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION qw_history_ensure_partitions(date, date), qw_history_drop_before(timestamptz, integer) TO qw_orchestrator;

-- A node's events stay readable once its row moved.
CREATE OR REPLACE VIEW node_events AS
 SELECT e.id, j.run_id, j.node_name, e.job_id, e.from_status, e.to_status, e.attempts, e.worker_id, e.error, e.at
   FROM job_events e
   JOIN workflow_node_jobs_all j ON e.job_table = 'workflow_node_jobs' AND j.id = e.job_id
  WHERE j.run_id IS NOT NULL;

-- The VRAM learner keeps its window of samples once they moved.
CREATE OR REPLACE FUNCTION qw_gpu_learn() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    task_of text := qw_gpu_task(NEW.node_module, NEW.node_name);
    win record;
BEGIN
    SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY w.per_device_bytes) / 2^30 AS p95, count(*) AS n, min(w.finished_at) AS oldest
      INTO win
      FROM (SELECT s.per_device_bytes, s.finished_at
              FROM (SELECT * FROM (SELECT j.peak_vram_bytes / greatest(j.gpus, 1) AS per_device_bytes, j.finished_at FROM workflow_node_jobs AS j
                                    WHERE j.required_model = NEW.required_model AND qw_gpu_task(j.node_module, j.node_name) = task_of
                                      AND j.status = 'completed' AND j.peak_vram_bytes IS NOT NULL
                                    ORDER BY j.finished_at DESC LIMIT 50) AS hot
                    UNION ALL
                    SELECT * FROM (SELECT j.peak_vram_bytes / greatest(j.gpus, 1), j.finished_at FROM workflow_node_jobs_history AS j
                                    WHERE j.required_model = NEW.required_model AND qw_gpu_task(j.node_module, j.node_name) = task_of
                                      AND j.status = 'completed' AND j.peak_vram_bytes IS NOT NULL
                                    ORDER BY j.finished_at DESC LIMIT 50) AS moved) AS s
             ORDER BY s.finished_at DESC LIMIT 50) AS w;
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
