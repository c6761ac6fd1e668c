-- Named queries of the operator commands (queue_workflows.ops.admin).
-- `{table}` and `{result_column}` are bound only to a job table's fixed identifiers (common.sqlfile); values are parameters.

-- name: worker_list
SELECT h.worker_id, h.host_label, h.queue, h.pid, h.state, h.current_job_id, h.started_at, h.last_seen,
       extract(epoch FROM now() - h.last_seen)::float AS last_seen_s,
       h.last_flagged_dead_at,
       h.lock_key IN (SELECT lock_key FROM qw_worker_sessions) AS connected
  FROM worker_heartbeats h
 ORDER BY h.host_label, h.queue, h.worker_id;

-- name: list_jobs
-- Hot and moved jobs alike (leader/history.py).
SELECT * FROM (
    SELECT 'ingest' AS family, id, queue, task_name AS name, status, attempts, max_attempts, watchdog_trips,
           claimed_by, created_at, started_at, finished_at, error
      FROM ingest_jobs_all
     WHERE (%(queue)s::text IS NULL OR queue = %(queue)s) AND (%(status)s::text IS NULL OR status = %(status)s)
    UNION ALL
    SELECT 'node', id, queue, node_name, status, attempts, max_attempts, watchdog_trips,
           claimed_by, created_at, started_at, finished_at, error
      FROM workflow_node_jobs_all
     WHERE (%(queue)s::text IS NULL OR queue = %(queue)s) AND (%(status)s::text IS NULL OR status = %(status)s)
) jobs
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;

-- name: get_job
-- `{table}` is a job table's `_all` view: a job that moved to history is found too.
SELECT * FROM {table} WHERE id = %(job_id)s;

-- name: restore_ingest_job
-- A retried job that moved to history comes back to the hot table first, whole.
WITH back AS (DELETE FROM ingest_jobs_history WHERE id = %(job_id)s RETURNING *)
INSERT INTO ingest_jobs SELECT * FROM back;

-- name: job_events_for
SELECT from_status, to_status, attempts, worker_id, error, at
  FROM job_events WHERE job_table = %(job_table)s AND job_id = %(job_id)s ORDER BY id;

-- name: cancel_job
-- A running job's worker hears of it (revocation NOTIFY) and stops with exit 77.
UPDATE {table}
   SET status = 'cancelled', finished_at = now(), lease_expires_at = NULL, updated_at = now(),
       error = coalesce(%(reason)s, error)
 WHERE id = %(job_id)s AND status IN ('scheduled', 'queued', 'running')
RETURNING *;

-- name: operator_retry_job
UPDATE {table}
   SET status = 'queued', attempts = 0, watchdog_trips = 0, run_after = now(), claimed_by = NULL,
       claim_lock_key = NULL, lease_expires_at = NULL, started_at = NULL, finished_at = NULL, updated_at = now()
 WHERE id = %(job_id)s AND status IN ('failed', 'cancelled')
RETURNING *;

-- name: lock_run_of_node_job
-- The run a node job belongs to, locked as the dispatcher locks it, so its state holds until the retry commits.
SELECT id, status FROM workflow_runs WHERE id = %(run_id)s FOR NO KEY UPDATE;

-- name: list_runs
SELECT r.id, r.workflow_name, r.status, r.created_at, r.finished_at, r.error, r.parent_run_id, r.parent_node, r.tenant,
       count(n.id) FILTER (WHERE n.status = 'completed') AS completed,
       count(n.id) FILTER (WHERE n.status IN ('queued', 'scheduled', 'running', 'awaiting_input', 'waiting')) AS active,
       count(n.id) FILTER (WHERE n.status = 'failed') AS failed,
       count(n.id) AS nodes_started,
       coalesce(jsonb_array_length(r.definition -> 'nodes'), 0) AS nodes_total
  FROM workflow_runs r
  LEFT JOIN workflow_node_jobs_all n ON n.run_id = r.id AND n.map_node IS NULL  -- a map's items are not nodes of the run; a completed run's may have moved
 WHERE %(status)s::text IS NULL OR r.status = %(status)s
 GROUP BY r.id
 ORDER BY r.id DESC
 LIMIT %(limit)s;
