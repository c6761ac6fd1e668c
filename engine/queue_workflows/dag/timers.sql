-- Named queries of sleep and wait_event nodes (queue_workflows.dag.timers, .events, .timekeeper).

-- name: timer_insert_node
-- A reached sleep or event wait: 'waiting' (never claimed), its deadline and key on the row.
INSERT INTO workflow_node_jobs (run_id, node_name, node_module, queue, status, priority, inputs, input_refs, max_attempts,
                                wake_at, event_key)
VALUES (%(run_id)s, %(node_name)s, NULL, 'cpu', 'waiting', %(priority)s, %(inputs)s, '{}'::jsonb, 1,
        coalesce(%(until)s::timestamptz, now() + make_interval(secs => %(after_seconds)s::float8)), %(event_key)s)
ON CONFLICT (run_id, node_name) DO NOTHING;

-- name: timer_rearm_node
-- A restarted run's reset sleep or event wait waits again, its deadline counted afresh.
UPDATE workflow_node_jobs
   SET status = 'waiting', inputs = %(inputs)s, event_key = %(event_key)s, error = NULL, updated_at = now(),
       wake_at = coalesce(%(until)s::timestamptz, now() + make_interval(secs => %(after_seconds)s::float8))
 WHERE run_id = %(run_id)s AND node_name = %(node_name)s AND status IN ('queued', 'waiting');

-- name: timer_fail_node
-- A value that resolved to nonsense ('for': "soon") fails the node; the outbox trigger follows.
UPDATE workflow_node_jobs
   SET status = 'failed', error = %(error)s, finished_at = now(), updated_at = now()
 WHERE run_id = %(run_id)s AND node_name = %(node_name)s AND status = 'waiting';

-- name: timer_fire_due
-- Due sleeps complete; due event waits time out: their default is the output, or they fail.
-- clock_timestamp, not now(): the transaction may have begun before the deadline passed.
WITH due AS MATERIALIZED (
    SELECT id FROM workflow_node_jobs
     WHERE status = 'waiting' AND wake_at <= clock_timestamp()
     ORDER BY wake_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE workflow_node_jobs n
   SET status = CASE WHEN n.event_key IS NULL OR n.inputs ? 'default' THEN 'completed' ELSE 'failed' END,
       context_delta = CASE WHEN n.event_key IS NULL
                            THEN jsonb_build_object('slept_until', to_char(n.wake_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
                            ELSE n.inputs -> 'default' END,
       error = CASE WHEN n.event_key IS NOT NULL AND NOT n.inputs ? 'default'
                    THEN format('node %%L timed out after %%ss: no event on key %%L (and no default)',
                                n.node_name, n.inputs ->> 'timeout', n.event_key) END,
       started_at = coalesce(n.started_at, n.created_at), finished_at = clock_timestamp(), updated_at = now()
  FROM due
 WHERE n.id = due.id
RETURNING n.id, n.run_id, n.node_name, n.status;

-- name: timer_next_due
SELECT extract(epoch FROM min(wake_at) - clock_timestamp())::float AS due_in
  FROM workflow_node_jobs WHERE status = 'waiting' AND wake_at IS NOT NULL;

-- Events (queue_workflows.dag.events) ------------------------------------------------------

-- name: event_insert
INSERT INTO workflow_events (event_key, run_id, payload, requested_by)
VALUES (%(event_key)s, %(run_id)s, %(payload)s, %(requested_by)s)
RETURNING id;

-- name: event_get
SELECT id, event_key, run_id, payload, status, error, applied_to, requested_by, created_at, processed_at
  FROM workflow_events WHERE id = %(id)s;

-- name: event_run_status
SELECT status FROM workflow_runs WHERE id = %(run_id)s;

-- name: event_reject_invalid
-- What plain SQL may insert and the API refuses, and events for a run that has ended.
UPDATE workflow_events e
   SET status = 'rejected', error = v.error, processed_at = now()
  FROM (SELECT p.id,
               CASE WHEN jsonb_typeof(p.payload) <> 'object'
                    THEN format('an event payload must be a JSON object (it becomes the node''s output), not %%s', jsonb_typeof(p.payload))
                    WHEN p.event_key = '' THEN 'an event key must not be empty'
                    WHEN r.status <> 'running' THEN format('run %%s is %%s: it takes no events', p.run_id, r.status)
               END AS error
          FROM workflow_events p LEFT JOIN workflow_runs r ON r.id = p.run_id
         WHERE p.status = 'pending'
         ORDER BY p.id LIMIT %(limit)s) v
 WHERE e.id = v.id AND v.error IS NOT NULL
RETURNING e.id, e.error;

-- name: event_match
-- Each waiting node takes the oldest open event on its key (one naming its run, or none): the
-- first event wins. An event naming no run completes every node waiting on its key.
WITH pairs AS MATERIALIZED (
    SELECT DISTINCT ON (n.id) n.id AS job_id, e.id AS event_id, e.payload
      FROM workflow_node_jobs n
      JOIN workflow_events e ON e.event_key = n.event_key AND (e.run_id IS NULL OR e.run_id = n.run_id)
     WHERE n.status = 'waiting' AND n.event_key IS NOT NULL AND e.status IN ('pending', 'kept')
     ORDER BY n.id, e.id
     LIMIT %(limit)s
), done AS (
    UPDATE workflow_node_jobs n
       SET status = 'completed', context_delta = p.payload, error = NULL,
           started_at = coalesce(n.started_at, n.created_at), finished_at = clock_timestamp(), updated_at = now()
      FROM pairs p
     WHERE n.id = p.job_id AND n.status = 'waiting'
    RETURNING n.id, n.run_id, n.event_key, p.event_id
), applied AS (
    UPDATE workflow_events e
       SET status = 'applied', error = NULL, processed_at = now(),
           applied_to = (SELECT array_agg(d.id ORDER BY d.id) FROM done d WHERE d.event_id = e.id)
     WHERE e.id IN (SELECT event_id FROM done)
    RETURNING e.id
), duplicates AS (
    -- An event kept for a run whose node has just taken another one is a duplicate now.
    UPDATE workflow_events k
       SET status = 'rejected', processed_at = now(),
           error = format('run %%s already took event %%s on key %%L', k.run_id, d.event_id, k.event_key)
      FROM done d
     WHERE k.status = 'kept' AND k.run_id = d.run_id AND k.event_key = d.event_key
       AND k.id NOT IN (SELECT event_id FROM done)
    RETURNING k.id
)
SELECT (SELECT count(*) FROM pairs) AS paired, (SELECT count(*) FROM done) AS completed,
       (SELECT count(*) FROM applied) AS applied, (SELECT count(*) FROM duplicates) AS refused;

-- name: event_keep_or_refuse
-- Events no node waits for yet are kept for the node that will; one whose (run, key) already
-- took an event or timed out, in a run still running, is refused.
UPDATE workflow_events e
   SET status = CASE WHEN v.job_id IS NULL THEN 'kept' ELSE 'rejected' END,
       error = CASE WHEN v.job_id IS NOT NULL
                    THEN format('node %%L of run %%s waiting on key %%L is already %%s', v.node_name, v.run_id, e.event_key, v.node_status) END,
       processed_at = CASE WHEN v.job_id IS NOT NULL THEN now() END
  FROM (SELECT p.id, d.id AS job_id, d.node_name, d.run_id, d.status AS node_status
          FROM workflow_events p
          LEFT JOIN LATERAL (
              SELECT n.id, n.node_name, n.run_id, n.status
                FROM workflow_node_jobs n JOIN workflow_runs r ON r.id = n.run_id AND r.status = 'running'
               WHERE n.event_key = p.event_key AND (p.run_id IS NULL OR n.run_id = p.run_id) AND n.status <> 'waiting'
               ORDER BY n.id LIMIT 1) d ON true
         WHERE p.status = 'pending'
         ORDER BY p.id LIMIT %(limit)s) v
 WHERE e.id = v.id
RETURNING e.id, e.status, e.error;
