-- Named queries of the orchestrator's cluster metrics (queue_workflows.leader.cluster_metrics).
-- Each is one cheap read; a sample runs them in one read-only transaction, a scrape never queries.

-- name: cluster_session
-- A sample must never wait long on a sick database: the next one comes regardless.
SELECT set_config('statement_timeout', %(statement_timeout_ms)s, false) AS statement_timeout;

-- name: cluster_term
-- What a standby reads too: the current term (0 before anyone led) and the database's clock.
SELECT coalesce((SELECT epoch FROM qw_leadership WHERE id = 1), 0) AS epoch,
       extract(epoch FROM now())::float AS db_now;

-- name: cluster_queue_depth
-- One arm per live status and table, so each reads its own partial index (waiting: migration 0055).
-- The queued arms also give how long the oldest claimable job has waited: since it was enqueued,
-- or since its run_after (a delay, a retry's backoff) if that came later; one pass for both.
SELECT queue, 'queued' AS status, count(*) AS n,
       max(extract(epoch FROM now() - greatest(created_at, run_after))) FILTER (WHERE run_after <= now())::float AS oldest_s
  FROM ingest_jobs WHERE status = 'queued' GROUP BY queue
UNION ALL
SELECT queue, 'queued', count(*), max(extract(epoch FROM now() - greatest(created_at, run_after))) FILTER (WHERE run_after <= now())::float
  FROM workflow_node_jobs WHERE status = 'queued' GROUP BY queue
UNION ALL
SELECT queue, 'running', count(*), NULL FROM ingest_jobs WHERE status = 'running' GROUP BY queue
UNION ALL
SELECT queue, 'running', count(*), NULL FROM workflow_node_jobs WHERE status = 'running' GROUP BY queue
UNION ALL
SELECT queue, 'scheduled', count(*), NULL FROM ingest_jobs WHERE status = 'scheduled' GROUP BY queue
UNION ALL
SELECT queue, 'scheduled', count(*), NULL FROM workflow_node_jobs WHERE status = 'scheduled' GROUP BY queue
UNION ALL
SELECT queue, 'waiting', count(*), NULL FROM workflow_node_jobs WHERE status = 'waiting' GROUP BY queue;

-- name: cluster_finished_between
-- Jobs that ended (completed or failed) in (since, until], read off the finished_at indexes while
-- the rows are still in the hot tables. wait_i/run_i: how many bucket bounds lie below the
-- duration, i.e. the index of its `le` bucket (as many as there are bounds: +Inf), so the grouped
-- result stays small however many jobs finished.
WITH f AS (
    SELECT queue, task_name AS task, status, started_at, finished_at, greatest(created_at, run_after) AS ready_at
      FROM ingest_jobs
     WHERE status IN ('completed', 'failed')
       AND finished_at > to_timestamp(%(since)s) AND finished_at <= to_timestamp(%(until)s)
    UNION ALL
    SELECT queue, node_name, status, started_at, finished_at, greatest(created_at, run_after)
      FROM workflow_node_jobs
     WHERE status IN ('completed', 'failed')
       AND finished_at > to_timestamp(%(since)s) AND finished_at <= to_timestamp(%(until)s)
), d AS (
    SELECT queue, task, status,
           greatest(extract(epoch FROM started_at - ready_at)::float, 0) AS wait_s,
           greatest(extract(epoch FROM finished_at - started_at)::float, 0) AS run_s
      FROM f
)
SELECT queue, task, status, count(*) AS n,
       width_bucket(wait_s, %(bounds)s::float8[]) - (wait_s = ANY(%(bounds)s::float8[]))::int AS wait_i,
       width_bucket(run_s, %(bounds)s::float8[]) - (run_s = ANY(%(bounds)s::float8[]))::int AS run_i,
       coalesce(sum(wait_s), 0) AS wait_sum, coalesce(sum(run_s), 0) AS run_sum, count(wait_s) AS timed
  FROM d
 GROUP BY queue, task, status, wait_i, run_i;

-- name: cluster_exits_after
-- Worker exits recorded after the watermark id (migration 0055), counted by code.
SELECT code, count(*) AS n, max(id) AS last_id
  FROM qw_worker_exits
 WHERE id > %(after_id)s
 GROUP BY code;

-- name: cluster_exits_watermark
SELECT coalesce(max(id), 0) AS last_id FROM qw_worker_exits;

-- name: cluster_workers
-- Every worker process's state; `dead` once its session is gone, its heartbeat is stale or the
-- sweep flagged it, until the sweep prunes the row. Then the switches no process answers to.
SELECT h.host_label, h.queue,
       CASE WHEN h.last_flagged_dead_at IS NOT NULL
              OR h.last_seen < now() - make_interval(secs => %(stale_after_seconds)s)
              OR h.lock_key NOT IN (SELECT lock_key FROM qw_worker_sessions) THEN 'dead'
            ELSE h.state END AS state,
       count(*) AS n
  FROM worker_heartbeats h
 GROUP BY 1, 2, 3
UNION ALL
SELECT c.host_label, c.queue, 'absent', 1
  FROM worker_controls c
 WHERE NOT EXISTS (SELECT 1 FROM worker_heartbeats h WHERE h.host_label = c.host_label AND h.queue = c.queue);
