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
-- Then how long until the next deadline. clock_timestamp, not now(): the transaction may have
-- begun before the deadline passed. One statement: the timekeeper's step is a few round trips.
WITH due AS MATERIALIZED (
    SELECT id FROM workflow_node_jobs
     WHERE status = 'waiting' AND wake_at <= clock_timestamp()
     ORDER BY wake_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), fired AS (
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
    RETURNING n.id
)
SELECT (SELECT count(*) FROM fired) AS fired,
       (SELECT extract(epoch FROM min(wake_at) - clock_timestamp())::float
          FROM workflow_node_jobs
         WHERE status = 'waiting' AND wake_at IS NOT NULL AND id NOT IN (SELECT id FROM fired)) AS due_in;

-- Events (queue_workflows.dag.events) ------------------------------------------------------

-- name: event_insert
-- The insert trigger delivers it (migration 0038): the row comes back applied, kept or rejected.
INSERT INTO workflow_events (event_key, run_id, payload, requested_by)
VALUES (%(event_key)s, %(run_id)s, %(payload)s, %(requested_by)s)
RETURNING id, event_key, run_id, payload, status, error, applied_to, requested_by, created_at, processed_at;

-- name: event_get
SELECT id, event_key, run_id, payload, status, error, applied_to, requested_by, created_at, processed_at
  FROM workflow_events WHERE id = %(id)s;

-- name: event_run_status
SELECT status FROM workflow_runs WHERE id = %(run_id)s;

-- name: event_process
-- Kept events (sent before their node was reached) to the nodes now waiting on their key, one
-- snapshot: each waiting node takes the oldest kept event on its key (one naming its run, or
-- none), so the first event wins; one naming no run completes every node waiting on its key. A
-- kept event for a run whose node has just taken another is a duplicate: refused.
WITH pairs AS MATERIALIZED (
    SELECT DISTINCT ON (n.id) n.id AS job_id, e.id AS event_id, e.payload
      FROM workflow_node_jobs n
      JOIN workflow_events e ON e.event_key = n.event_key AND (e.run_id IS NULL OR e.run_id = n.run_id)
     WHERE n.status = 'waiting' AND n.event_key IS NOT NULL AND e.status = 'kept'
     ORDER BY n.id, e.id
     LIMIT %(limit)s
), locked AS MATERIALIZED (  -- in id order, as the event trigger locks them: no deadlock
    SELECT id FROM workflow_node_jobs WHERE id IN (SELECT job_id FROM pairs) ORDER BY id FOR UPDATE
), done AS (
    UPDATE workflow_node_jobs n
       SET status = 'completed', context_delta = p.payload, error = NULL,
           started_at = coalesce(n.started_at, n.created_at), finished_at = clock_timestamp(), updated_at = now()
      FROM pairs p JOIN locked l ON l.id = p.job_id
     WHERE n.id = p.job_id AND n.status = 'waiting'
    RETURNING n.id, n.run_id, n.event_key, p.event_id
), applied AS (
    UPDATE workflow_events e
       SET status = 'applied', error = NULL, processed_at = now(),
           applied_to = (SELECT array_agg(d.id ORDER BY d.id) FROM done d WHERE d.event_id = e.id)
     WHERE e.id IN (SELECT event_id FROM done)
    RETURNING e.id
), duplicates AS (
    UPDATE workflow_events k
       SET status = 'rejected', processed_at = now(),
           error = format('run %%s already took event %%s on key %%L', k.run_id, d.event_id, k.event_key)
      FROM done d
     WHERE k.status = 'kept' AND k.run_id = d.run_id AND k.event_key = d.event_key
       AND k.id NOT IN (SELECT event_id FROM done)
    RETURNING k.id, k.error
)
SELECT (SELECT count(*) FROM pairs) AS paired, (SELECT count(*) FROM applied) AS applied,
       (SELECT json_agg(json_build_object('id', id, 'error', error)) FROM duplicates) AS rejected;
