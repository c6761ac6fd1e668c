-- Named queries of the hw-metrics sidecar (queue_workflows.telemetry.store).

-- name: telemetry_session
-- A sidecar must never wait long on a sick database: its samples keep coming regardless.
SELECT set_config('statement_timeout', %(statement_timeout_ms)s, false) AS statement_timeout;

-- name: host_metrics_upsert
INSERT INTO host_metrics (host_label, payload_version, payload, sampled_at, updated_at)
VALUES (%(host_label)s, %(payload_version)s, %(payload)s::jsonb, to_timestamp(%(sampled_at)s), now())
ON CONFLICT (host_label) DO UPDATE
   SET payload_version = EXCLUDED.payload_version, payload = EXCLUDED.payload,
       sampled_at = EXCLUDED.sampled_at, updated_at = now();

-- name: host_metrics_notify
SELECT pg_notify('hw_metrics', %(payload)s);

-- name: host_metrics_latest
SELECT host_label, payload_version, payload, sampled_at, updated_at FROM host_metrics ORDER BY host_label;

-- name: metrics_queue_depth
-- One arm per status so each uses its partial index; the age is of the oldest queued job.
SELECT queue, 'queued' AS status, count(*) AS n,
       extract(epoch FROM now() - min(created_at))::float AS oldest_s
  FROM {table} WHERE status = 'queued' GROUP BY queue
UNION ALL
SELECT queue, 'running', count(*), NULL FROM {table} WHERE status = 'running' GROUP BY queue
UNION ALL
SELECT queue, 'scheduled', count(*), NULL FROM {table} WHERE status = 'scheduled' GROUP BY queue;

-- name: metrics_db_now
-- The outcome counters' window ends `lag` seconds ago, so a finish still committing is not missed.
SELECT extract(epoch FROM now())::float - %(lag_seconds)s AS until;

-- name: metrics_finished_between
-- With what those jobs cost (queue_workflows.worker.usage; NULL for jobs that recorded nothing).
-- `{table}` is a job table's `_all` view, so a job moved to history before a scrape still counts.
SELECT queue, status, count(*) AS n, coalesce(sum(cpu_seconds), 0) AS cpu_seconds,
       coalesce(sum(wall_seconds), 0) AS wall_seconds, count(*) FILTER (WHERE model_hit = false) AS model_loads,
       coalesce(sum(model_load_seconds), 0) AS model_load_seconds
  FROM {table}
 WHERE status IN ('completed', 'failed', 'cancelled')
   AND finished_at > to_timestamp(%(since)s) AND finished_at <= to_timestamp(%(until)s)
 GROUP BY queue, status;

-- name: metrics_live_workers
-- The whole row as JSON, so the warm-model column is read when a migration has added it.
SELECT h.host_label, h.queue, h.state, to_jsonb(h) AS row
  FROM worker_heartbeats h
 WHERE h.last_seen > now() - make_interval(secs => %(stale_after_seconds)s)
   AND h.lock_key IN (SELECT lock_key FROM qw_worker_sessions);
