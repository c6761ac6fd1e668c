-- Named queries of the cost report (queue_workflows.ops.costs): what finished jobs cost, summed in SQL.

-- name: cost_report
-- Finished jobs of both families in [since, until), grouped by one key, plus a totals row
-- (the empty grouping set). Each side's status list and finished_at range match its partial
-- finished index (ingest_jobs_finished_idx, workflow_node_jobs_outcome_idx), so a narrow window
-- reads only its own rows; the `_all` views add the moved jobs (history's finished_at partitions). GPU-seconds are wall seconds times the GPUs a gpu-queue node held.
WITH finished AS (
    SELECT tenant, queue, task_name AS task, NULL::text AS model, split_part(claimed_by, ':', 1) AS host,
           status, cpu_seconds, wall_seconds, 0::double precision AS gpu_seconds, peak_vram_bytes, peak_rss_bytes,
           model_load_seconds, model_hit
      FROM ingest_jobs_all
     WHERE status IN ('completed', 'failed', 'cancelled')
       AND finished_at >= %(since)s AND finished_at < %(until)s
    UNION ALL
    SELECT tenant, queue, qw_gpu_task(node_module, node_name), required_model, split_part(claimed_by, ':', 1),
           status, cpu_seconds, wall_seconds, CASE WHEN queue = 'gpu' THEN wall_seconds * gpus ELSE 0 END,
           peak_vram_bytes, peak_rss_bytes, model_load_seconds, model_hit
      FROM workflow_node_jobs_all
     WHERE status IN ('completed', 'failed', 'cancelled')
       AND finished_at >= %(since)s AND finished_at < %(until)s
), keyed AS (
    SELECT CASE %(by)s WHEN 'tenant' THEN tenant WHEN 'queue' THEN queue WHEN 'task' THEN task
                       WHEN 'model' THEN model WHEN 'host' THEN nullif(host, '') END AS grp,
           finished.*
      FROM finished
)
SELECT grouping(grp) = 1 AS is_total, grp AS "group",
       count(*) AS jobs,
       count(*) FILTER (WHERE status = 'completed') AS completed,
       count(*) FILTER (WHERE status = 'failed') AS failed,
       count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
       coalesce(sum(cpu_seconds), 0) AS cpu_seconds,
       coalesce(sum(gpu_seconds), 0) AS gpu_seconds,
       coalesce(sum(wall_seconds), 0) AS wall_seconds,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY peak_vram_bytes) AS peak_vram_p50_bytes,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY peak_vram_bytes) AS peak_vram_p95_bytes,
       max(peak_vram_bytes) AS peak_vram_max_bytes,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY peak_rss_bytes) AS peak_rss_p95_bytes,
       coalesce(sum(model_load_seconds), 0) AS model_load_seconds,
       count(*) FILTER (WHERE NOT model_hit) AS model_loads,
       count(*) FILTER (WHERE model_hit) AS model_hits,
       (count(*) FILTER (WHERE model_hit))::float8 / nullif(count(model_hit), 0) AS model_hit_rate
  FROM keyed
 GROUP BY GROUPING SETS ((grp), ())
 ORDER BY is_total DESC, gpu_seconds DESC, cpu_seconds DESC, wall_seconds DESC, grp NULLS LAST
 LIMIT %(limit)s;
