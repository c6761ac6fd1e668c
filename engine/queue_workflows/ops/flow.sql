-- Named queries of flow control (queue_workflows.ops.flow, docs/flow_control.md): limits and their keys.

-- name: upsert_flow_limit
INSERT INTO flow_limits (queue, task, key_path, max_running, rate_count, rate_seconds)
VALUES (%(queue)s, %(task)s, %(key_path)s, %(max_running)s, %(rate_count)s, %(rate_seconds)s)
ON CONFLICT (queue, task) DO UPDATE
   SET key_path = EXCLUDED.key_path, max_running = EXCLUDED.max_running, rate_count = EXCLUDED.rate_count,
       rate_seconds = EXCLUDED.rate_seconds, updated_at = now()
RETURNING *;

-- name: delete_flow_limit
DELETE FROM flow_limits WHERE queue = %(queue)s AND task = %(task)s RETURNING *;

-- name: list_flow_limits
SELECT queue, task, key_path, max_running, rate_count, rate_seconds, updated_at
  FROM flow_limits ORDER BY queue, task;

-- name: list_flow_keys
-- Each key in use: its running jobs (both tables) against its limit, and its tokens as of now.
-- A key no job runs under that has not been used for a day is left out.
WITH running AS (
    SELECT queue, flow_scope AS scope, flow_key AS key, count(*) AS n
      FROM (SELECT queue, flow_scope, flow_key FROM ingest_jobs WHERE status = 'running' AND flow_scope IS NOT NULL
            UNION ALL
            SELECT queue, flow_scope, flow_key FROM workflow_node_jobs WHERE status = 'running' AND flow_scope IS NOT NULL) AS r
     GROUP BY 1, 2, 3
), keyed AS (
    SELECT k.queue, k.scope, k.key, k.tokens, k.refilled_at FROM flow_keys AS k
    UNION
    SELECT r.queue, r.scope, r.key, NULL, NULL FROM running AS r
     WHERE NOT EXISTS (SELECT FROM flow_keys AS k WHERE (k.queue, k.scope, k.key) = (r.queue, r.scope, r.key))
)
SELECT k.queue, k.scope AS task, k.key, coalesce(r.n, 0) AS running, l.max_running,
       CASE WHEN l.rate_count IS NOT NULL THEN
            round(least(l.rate_count, coalesce(k.tokens, l.rate_count)
                        + extract(epoch FROM clock_timestamp() - coalesce(k.refilled_at, clock_timestamp())) * l.rate_count / l.rate_seconds)::numeric, 2)::float8
       END AS tokens,
       l.rate_count, l.rate_seconds
  FROM keyed AS k
  LEFT JOIN running AS r ON (r.queue, r.scope, r.key) = (k.queue, k.scope, k.key)
  LEFT JOIN flow_limits AS l ON (l.queue, l.task) = (k.queue, k.scope)
 WHERE r.n IS NOT NULL OR k.refilled_at > now() - interval '1 day'
 ORDER BY k.queue, k.scope, coalesce(r.n, 0) DESC, k.key
 LIMIT %(limit)s;

-- name: flow_summary
-- One line per limited queue for `qw status`: keys in use, running under limits, keys at their limit.
WITH keys AS (
    SELECT queue, running, max_running FROM (
        SELECT k.queue, (SELECT count(*) FROM ingest_jobs j WHERE j.status = 'running' AND j.queue = k.queue AND j.flow_scope = k.scope AND j.flow_key = k.key)
                      + (SELECT count(*) FROM workflow_node_jobs j WHERE j.status = 'running' AND j.queue = k.queue AND j.flow_scope = k.scope AND j.flow_key = k.key) AS running,
               l.max_running
          FROM flow_keys AS k JOIN flow_limits AS l ON (l.queue, l.task) = (k.queue, k.scope)) AS x
)
SELECT l.queue, count(DISTINCT l.task) AS limits,
       (SELECT count(*) FROM keys WHERE keys.queue = l.queue AND keys.running > 0) AS keys_running,
       (SELECT coalesce(sum(running), 0) FROM keys WHERE keys.queue = l.queue) AS running,
       (SELECT count(*) FROM keys WHERE keys.queue = l.queue AND keys.running >= keys.max_running) AS keys_full
  FROM flow_limits AS l GROUP BY l.queue ORDER BY l.queue;
