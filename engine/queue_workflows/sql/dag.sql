-- Named queries of the DAG runner (queue_workflows.dag.store / .outbox).

-- name: dag_insert_run
INSERT INTO workflow_runs (workflow_name, status, context, definition, priority)
VALUES (%(workflow_name)s, 'running', %(context)s, %(definition)s, %(priority)s)
RETURNING id;

-- name: dag_lock_run
-- Serialises dispatch per run: two drains of one run's events decide one after the other.
SELECT * FROM workflow_runs WHERE id = %(run_id)s FOR UPDATE;

-- name: dag_get_run
SELECT * FROM workflow_runs WHERE id = %(run_id)s;

-- name: dag_run_nodes
SELECT id, node_name, queue, status, attempts, max_attempts, context_delta, error, required_model,
       created_at, started_at, finished_at
  FROM workflow_node_jobs
 WHERE run_id = %(run_id)s
 ORDER BY finished_at NULLS LAST, id;

-- name: dag_insert_node
-- Never twice: the unique (run_id, node_name) makes a repeated dispatch insert nothing.
INSERT INTO workflow_node_jobs (run_id, node_name, node_module, queue, status, priority, required_model,
                                inputs, input_refs, max_attempts, budget_seconds, finished_at)
VALUES (%(run_id)s, %(node_name)s, %(node_module)s, %(queue)s, %(status)s, %(priority)s, %(required_model)s,
        %(inputs)s, %(input_refs)s, %(max_attempts)s, %(budget_seconds)s,
        CASE WHEN %(status)s = 'skipped' THEN now() END)
ON CONFLICT (run_id, node_name) DO NOTHING;

-- name: dag_cancel_nodes
UPDATE workflow_node_jobs
   SET status = 'cancelled', error = %(reason)s, finished_at = now(), updated_at = now()
 WHERE run_id = %(run_id)s AND node_name = ANY(%(names)s::text[]) AND status IN ('scheduled', 'queued');

-- name: dag_finish_run
UPDATE workflow_runs
   SET status = %(status)s, error = %(error)s, finished_at = now(), updated_at = now()
 WHERE id = %(run_id)s AND status NOT IN ('completed', 'failed', 'cancelled');

-- name: dag_pending_events
SELECT * FROM workflow_dispatch_events
 WHERE processed_at IS NULL AND poisoned_at IS NULL AND next_attempt_at <= now()
 ORDER BY id
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED;

-- name: dag_events_done
UPDATE workflow_dispatch_events SET processed_at = now() WHERE id = ANY(%(ids)s::bigint[]);

-- name: dag_events_failed
-- A fan-out that raised: try again after a backoff, or poison-flag the events and their run.
WITH bumped AS (
    UPDATE workflow_dispatch_events
       SET attempts = attempts + 1, last_error = %(error)s,
           next_attempt_at = now() + make_interval(secs => %(delay_seconds)s),
           poisoned_at = CASE WHEN attempts + 1 >= %(max_attempts)s THEN now() END
     WHERE id = ANY(%(ids)s::bigint[])
    RETURNING run_id, poisoned_at, attempts
)
UPDATE workflow_runs r
   SET poisoned_at = now(), updated_at = now(),
       error = format('dispatch poisoned after %%s attempts: %%s', b.attempts, %(error)s::text)
  FROM (SELECT run_id, max(attempts) AS attempts FROM bumped WHERE poisoned_at IS NOT NULL GROUP BY run_id) b
 WHERE r.id = b.run_id AND r.poisoned_at IS NULL
RETURNING r.id;

-- name: dag_next_event_due
SELECT extract(epoch FROM min(next_attempt_at) - now())::float AS due_in
  FROM workflow_dispatch_events WHERE processed_at IS NULL AND poisoned_at IS NULL;
