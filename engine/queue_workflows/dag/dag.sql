-- Named queries of the DAG runner (queue_workflows.dag.store / .outbox).

-- name: dag_insert_run
INSERT INTO workflow_runs (workflow_name, status, context, definition, priority, tenant, trace_context)
VALUES (%(workflow_name)s, 'running', %(context)s, %(definition)s, %(priority)s, %(tenant)s, %(trace_context)s)
RETURNING id;

-- name: dag_lock_run
-- Serialises dispatch per run: two drains of one run's events decide one after the other.
-- NO KEY: a worker committing a node's outbox event (a foreign key to this row, so a KEY SHARE
-- lock on it) must not wait for a drain in flight.
SELECT * FROM workflow_runs WHERE id = %(run_id)s FOR NO KEY UPDATE;

-- name: dag_lock_run_head
-- The same lock for dispatch, without the definition and context: a wide run's definition is
-- parsed once per process (store._parsed), and the context is read only when a reference needs it.
-- Its trace context is what the nodes it dispatches carry (docs/tracing.md).
SELECT id, status, priority, depth, created_at, definition IS NOT NULL AS has_definition, trace_context
  FROM workflow_runs WHERE id = %(run_id)s FOR NO KEY UPDATE;

-- name: dag_run_definition
SELECT definition FROM workflow_runs WHERE id = %(run_id)s;

-- name: dag_node_states
-- By name through the unique (run_id, node_name): a map's item rows are never read or counted as nodes.
SELECT node_name, status FROM workflow_node_jobs WHERE run_id = %(run_id)s AND node_name = ANY(%(names)s::text[]);

-- name: dag_run_done_count
SELECT count(*) AS n FROM workflow_node_jobs
 WHERE run_id = %(run_id)s AND node_name = ANY(%(names)s::text[]) AND status IN ('completed', 'skipped');

-- name: dag_run_scope
-- What references resolve against: the run's context and its completed outputs, in completion order.
SELECT r.context, j.node_name, j.status, j.context_delta
  FROM workflow_runs r
  LEFT JOIN workflow_node_jobs j ON j.run_id = r.id AND j.node_name = ANY(%(names)s::text[]) AND j.status = 'completed'
 WHERE r.id = %(run_id)s
 ORDER BY j.finished_at NULLS LAST, j.id;

-- name: dag_get_run
SELECT * FROM workflow_runs WHERE id = %(run_id)s;

-- name: dag_run_nodes
-- A run's nodes, never a map's items (`map.progress` counts those); a completed run's may have
-- moved to history (leader/history.py).
SELECT id, node_name, queue, status, attempts, max_attempts, context_delta, error, required_model,
       map_total, created_at, started_at, finished_at, wake_at, event_key
  FROM workflow_node_jobs_all
 WHERE run_id = %(run_id)s AND map_node IS NULL
 ORDER BY finished_at NULLS LAST, id;

-- name: dag_run_nodes_named
-- The same for a run with a definition, by name: a 100,000-item map costs nothing here.
SELECT id, node_name, queue, status, attempts, max_attempts, context_delta, error, required_model,
       map_total, created_at, started_at, finished_at, wake_at, event_key
  FROM workflow_node_jobs_all
 WHERE run_id = %(run_id)s AND node_name = ANY(%(names)s::text[])
 ORDER BY finished_at NULLS LAST, id;

-- name: dag_insert_node
-- Never twice: the unique (run_id, node_name) makes a repeated dispatch insert nothing.
INSERT INTO workflow_node_jobs (run_id, node_name, node_module, queue, status, priority, required_model,
                                inputs, input_refs, max_attempts, budget_seconds, retry_policy, concurrency_key, gpus, vram_gb, finished_at,
                                trace_context)
VALUES (%(run_id)s, %(node_name)s, %(node_module)s, %(queue)s, %(status)s, %(priority)s, %(required_model)s,
        %(inputs)s, %(input_refs)s, %(max_attempts)s, %(budget_seconds)s, %(retry_policy)s, %(concurrency_key)s, %(gpus)s, %(vram_gb)s,
        CASE WHEN %(status)s = 'skipped' THEN now() END, %(trace_context)s)
ON CONFLICT (run_id, node_name) DO NOTHING;

-- name: dag_cancel_nodes
-- A cancelled map takes its not-started items with it.
UPDATE workflow_node_jobs
   SET status = 'cancelled', error = %(reason)s, finished_at = now(), updated_at = now()
 WHERE run_id = %(run_id)s AND (node_name = ANY(%(names)s::text[]) OR map_node = ANY(%(names)s::text[]))
   AND status IN ('scheduled', 'queued', 'awaiting_input', 'waiting');

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

-- Cancel / restart / reconcile (queue_workflows.dag.control) ------------------------------

-- name: dag_cancel_run
UPDATE workflow_runs
   SET status = 'cancelled', error = %(reason)s, finished_at = now(), updated_at = now()
 WHERE id = %(run_id)s AND status NOT IN ('completed', 'failed', 'cancelled')
RETURNING *;

-- name: dag_cancel_open_nodes
-- Not-started nodes always; running ones only for a hard cancel (the status change revokes the
-- job: its worker exits 77). Each cancelled node gets its outbox event (a no-op for an ended run).
UPDATE workflow_node_jobs
   SET status = 'cancelled', error = %(reason)s, finished_at = now(), lease_expires_at = NULL, updated_at = now()
 WHERE run_id = %(run_id)s
   AND (status IN ('scheduled', 'queued', 'awaiting_input', 'waiting') OR (%(hard)s AND status = 'running'))
RETURNING node_name, status;

-- name: dag_restart_run
UPDATE workflow_runs
   SET status = 'running', error = NULL, finished_at = NULL, poisoned_at = NULL, updated_at = now(),
       reconcile_attempts = 0, reconcile_next_at = NULL
 WHERE id = %(run_id)s AND status IN ('failed', 'cancelled')
RETURNING *;

-- name: dag_reset_nodes
-- Fresh attempts for the failed/cancelled nodes of a restarted run; completed outputs and
-- skipped markers are not touched, and the row (its id, its event log) is reused, never duplicated.
-- A map's row and its items wait: the map's next step promotes the items within max_parallel.
UPDATE workflow_node_jobs
   SET status = CASE WHEN node_name = ANY(%(input_steps)s::text[]) THEN 'awaiting_input'
                     WHEN node_name = ANY(%(held)s::text[]) OR node_name = ANY(%(maps)s::text[]) OR map_node IS NOT NULL THEN 'waiting'
                     ELSE 'queued' END,
       attempts = 0, watchdog_trips = 0, run_after = now(), claimed_by = NULL, claim_lock_key = NULL,
       lease_expires_at = NULL, started_at = NULL, finished_at = NULL, error = NULL, context_delta = NULL,
       updated_at = now()
 WHERE run_id = %(run_id)s AND status IN ('failed', 'cancelled')
RETURNING node_name, status;

-- name: dag_stalled_runs
-- Runs nothing will move: running ones with no live node and no pending outbox event (both seen
-- in one snapshot, so a drain in flight keeps its run off this list), and queued ones (inserted
-- by plain SQL, never started). Not before their retry is due; locked, skipping busy runs.
SELECT r.id, r.status, r.reconcile_attempts
  FROM workflow_runs r
 WHERE r.status IN ('running', 'queued') AND r.definition IS NOT NULL AND r.poisoned_at IS NULL
   AND (r.reconcile_next_at IS NULL OR r.reconcile_next_at <= now())
   AND NOT EXISTS (SELECT 1 FROM workflow_node_jobs j
                    WHERE j.run_id = r.id AND j.status IN ('scheduled', 'queued', 'running', 'awaiting_input', 'waiting'))
   AND NOT EXISTS (SELECT 1 FROM workflow_dispatch_events e
                    WHERE e.run_id = r.id AND e.processed_at IS NULL AND e.poisoned_at IS NULL)
 ORDER BY r.id
 LIMIT %(limit)s
   FOR UPDATE OF r SKIP LOCKED;

-- name: dag_reconcile_failed
-- A stalled run whose step raised: retried after base * 2^(attempts - 1) seconds (at most max), and
-- poison-flagged at max_attempts, so the sweep (which skips poisoned runs) stops.
UPDATE workflow_runs
   SET reconcile_attempts = reconcile_attempts + 1, updated_at = now(),
       reconcile_next_at = now() + make_interval(secs => least(%(backoff_max)s, %(backoff_base)s * 2 ^ reconcile_attempts)),
       poisoned_at = CASE WHEN reconcile_attempts + 1 >= %(max_attempts)s THEN now() END,
       error = CASE WHEN reconcile_attempts + 1 >= %(max_attempts)s
                    THEN format('reconcile poisoned after %%s attempts: %%s', reconcile_attempts + 1, %(error)s::text) ELSE error END
 WHERE id = %(run_id)s AND poisoned_at IS NULL
RETURNING reconcile_attempts AS attempts, poisoned_at, extract(epoch FROM reconcile_next_at - now())::float AS retry_in;

-- name: dag_reconcile_done
UPDATE workflow_runs SET reconcile_attempts = 0, reconcile_next_at = NULL WHERE id = %(run_id)s AND reconcile_attempts > 0;

-- name: dag_start_queued_run
-- A run inserted as 'queued' by plain SQL, started as start_run starts one (its roots follow).
UPDATE workflow_runs SET status = 'running', updated_at = now() WHERE id = %(run_id)s AND status = 'queued'
RETURNING context;

-- name: dag_run_state
SELECT status FROM workflow_runs WHERE id = %(run_id)s;

-- Input steps (queue_workflows.dag.inputs) --------------------------------------------------

-- name: dag_node_state
SELECT id, status FROM workflow_node_jobs WHERE run_id = %(run_id)s AND node_name = %(node_name)s;

-- name: dag_insert_submission
INSERT INTO workflow_input_submissions (run_id, node_name, value)
VALUES (%(run_id)s, %(node_name)s, %(value)s)
RETURNING id;

-- name: dag_claim_submissions
-- The LIMITed pick is fenced (MATERIALIZED: run once), as in claim_batch.
WITH picked AS MATERIALIZED (
    SELECT id FROM workflow_input_submissions
     WHERE status = 'pending' ORDER BY id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
)
UPDATE workflow_input_submissions s
   SET status = 'processing', claimed_by = %(listener)s, claimed_at = now(), attempts = s.attempts + 1
  FROM picked
 WHERE s.id = picked.id
RETURNING s.*;

-- name: dag_get_submission
SELECT * FROM workflow_input_submissions
 WHERE id = %(id)s AND status = 'processing' AND claimed_by = %(listener)s;

-- name: dag_reject_stale_submissions
-- Answers to a run's previous life: a restarted input step waits for a new one.
UPDATE workflow_input_submissions
   SET status = 'rejected', error = %(error)s, processed_at = now()
 WHERE run_id = %(run_id)s AND status IN ('pending', 'processing')
RETURNING id;

-- name: dag_lock_submission
SELECT * FROM workflow_input_submissions
 WHERE id = %(id)s AND status = 'processing' AND claimed_by = %(listener)s
   FOR UPDATE SKIP LOCKED;

-- name: dag_resume_input_node
-- The submitted value is the node's output; the outbox trigger writes its event in this transaction.
UPDATE workflow_node_jobs
   SET status = 'completed', context_delta = %(value)s, error = NULL,
       started_at = coalesce(started_at, now()), finished_at = now(), updated_at = now()
 WHERE run_id = %(run_id)s AND node_name = %(node_name)s AND status = 'awaiting_input'
RETURNING id;

-- name: dag_submission_done
UPDATE workflow_input_submissions
   SET status = %(status)s, error = %(error)s, processed_at = now()
 WHERE id = %(id)s;

-- name: dag_reclaim_submissions
-- A submission claimed by a listener that died (or stalled) before applying it goes back to
-- 'pending'; after max_attempts claims it is rejected instead of looping.
UPDATE workflow_input_submissions
   SET status = CASE WHEN attempts >= %(max_attempts)s THEN 'rejected' ELSE 'pending' END,
       error = CASE WHEN attempts >= %(max_attempts)s
                    THEN format('gave up after %%s claims: its listener never finished it', attempts) ELSE error END,
       processed_at = CASE WHEN attempts >= %(max_attempts)s THEN now() END,
       claimed_by = NULL, claimed_at = NULL
 WHERE status = 'processing' AND claimed_at < now() - make_interval(secs => %(stale_seconds)s)
RETURNING id, status;

-- name: dag_running_nodes
-- The run's nodes still running after a cancel: their workers hear of it and stop.
SELECT node_name FROM workflow_node_jobs WHERE run_id = %(run_id)s AND status = 'running' ORDER BY id;
