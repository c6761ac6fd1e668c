-- Named queries of the operator dashboard's reads (queue_workflows.ops.overview). `{table}` is
-- filled only with a fixed job table identifier; values are parameters.

-- name: overview_workers
-- Every worker process with its (host, queue) switch; then the switches no process stands
-- behind (a worker turned OFF with `hard` that nobody restarted), so OFF stays visible.
SELECT h.worker_id, h.host_label, h.queue, h.pid, h.state, h.current_job_id, h.last_seen,
       extract(epoch FROM now() - h.last_seen)::float AS last_seen_s, h.last_flagged_dead_at,
       h.lock_key IN (SELECT lock_key FROM qw_worker_sessions) AS connected,
       to_jsonb(h) AS heartbeat,
       c.desired_state, c.stop_policy, c.requested_by, c.reason, c.updated_at AS control_updated_at
  FROM worker_heartbeats h
  LEFT JOIN worker_controls c ON c.host_label = h.host_label AND c.queue = h.queue
UNION ALL
SELECT NULL, c.host_label, c.queue, NULL, NULL, NULL, NULL, NULL, NULL, false, NULL,
       c.desired_state, c.stop_policy, c.requested_by, c.reason, c.updated_at
  FROM worker_controls c
 WHERE NOT EXISTS (SELECT 1 FROM worker_heartbeats h WHERE h.host_label = c.host_label AND h.queue = c.queue)
 ORDER BY host_label, queue, worker_id;

-- name: overview_throughput
-- Finished jobs per queue and minute over the last 15 minutes (the finished_at index of 0019 bounds it).
-- `{table}` is a job table's `_all` view: jobs finished minutes ago may have moved to history.
SELECT queue, status, floor(extract(epoch FROM now() - finished_at) / 60)::int AS minutes_ago, count(*) AS n
  FROM {table}
 WHERE finished_at > now() - interval '15 minutes' AND status IN ('completed', 'failed')
 GROUP BY 1, 2, 3;

-- name: overview_run
SELECT id, workflow_name, status, error, priority, definition, created_at, finished_at, poisoned_at
  FROM workflow_runs WHERE id = %(run_id)s;

-- name: overview_run_nodes
SELECT id, node_name, queue, status, attempts, max_attempts, watchdog_trips, required_model, error,
       claimed_by, created_at, started_at, finished_at,
       extract(epoch FROM coalesce(finished_at, now()) - started_at)::float AS duration_s
  FROM workflow_node_jobs_all WHERE run_id = %(run_id)s AND map_node IS NULL ORDER BY id;  -- a map's items: run_status's progress

-- name: overview_search_jobs
-- list_jobs with a task-name filter (a case-insensitive substring, no LIKE wildcards).
SELECT * FROM (
    SELECT 'ingest' AS family, id, queue, task_name AS name, status, attempts, max_attempts,
           claimed_by, created_at, started_at, finished_at, error
      FROM ingest_jobs_all
     WHERE (%(queue)s::text IS NULL OR queue = %(queue)s) AND (%(status)s::text IS NULL OR status = %(status)s)
       AND (%(task)s::text IS NULL OR strpos(lower(task_name), lower(%(task)s)) > 0)
    UNION ALL
    SELECT 'node', id, queue, node_name, status, attempts, max_attempts,
           claimed_by, created_at, started_at, finished_at, error
      FROM workflow_node_jobs_all
     WHERE (%(queue)s::text IS NULL OR queue = %(queue)s) AND (%(status)s::text IS NULL OR status = %(status)s)
       AND (%(task)s::text IS NULL OR strpos(lower(node_name), lower(%(task)s)) > 0)
) jobs
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;
