-- Named queries of map nodes (queue_workflows.dag.map): a map's items are rows of
-- workflow_node_jobs tied to it by map_node/map_index, created and promoted in batches by SQL,
-- so the orchestrator never holds the list nor writes one transaction per item.

-- name: map_parent
SELECT id, status, map_total FROM workflow_node_jobs
 WHERE run_id = %(run_id)s AND node_name = %(node)s
   FOR UPDATE;

-- name: map_measure
-- The list the map runs over: a literal, a path into the run's context, or a path into a
-- completed upstream node's output (its default when missing). Read in Postgres, never here.
WITH src AS MATERIALIZED (
    SELECT coalesce(
        CASE WHEN %(literal)s::jsonb IS NOT NULL THEN %(literal)s::jsonb
             WHEN %(source_node)s::text IS NULL
             THEN (SELECT r.context FROM workflow_runs r WHERE r.id = %(run_id)s) #> %(path)s::text[]
             ELSE (SELECT j.context_delta FROM workflow_node_jobs j
                    WHERE j.run_id = %(run_id)s AND j.node_name = %(source_node)s AND j.status = 'completed') #> %(path)s::text[]
        END,
        %(default)s::jsonb) AS list
)
SELECT coalesce(jsonb_typeof(list), 'missing') AS type,
       CASE WHEN jsonb_typeof(list) = 'array' THEN jsonb_array_length(list) END AS total
  FROM src;

-- name: map_set_total
UPDATE workflow_node_jobs SET map_total = %(total)s, updated_at = now() WHERE id = %(id)s;

-- name: map_counts
-- Only the items not completed are counted (a partial index holds just those), plus the next
-- index from the ordered index: a step costs the width of the window, not of the whole map.
-- The next index as ORDER BY ... LIMIT 1, not max(): the planner, misled by stale statistics on a
-- table that grew by thousands of items a second, otherwise read every item of the map's index.
SELECT coalesce((SELECT map_index + 1 FROM workflow_node_jobs
                  WHERE run_id = %(run_id)s AND map_node = %(node)s
                  ORDER BY map_index DESC LIMIT 1), 0) AS created,
       count(*) FILTER (WHERE status IN ('failed', 'cancelled')) AS failed,
       count(*) FILTER (WHERE status IN ('scheduled', 'queued', 'running')) AS live,
       count(*) FILTER (WHERE status = 'waiting') AS held
  FROM workflow_node_jobs
 WHERE run_id = %(run_id)s AND map_node = %(node)s AND status <> 'completed';

-- name: map_first_failure
-- `<> 'completed'` spelled out: it is what lets the planner use the partial index of open items.
SELECT map_index, status, error FROM workflow_node_jobs
 WHERE run_id = %(run_id)s AND map_node = %(node)s AND status IN ('failed', 'cancelled') AND status <> 'completed'
 ORDER BY map_index
 LIMIT 1;

-- name: map_promote
-- Items held back (a restart resets its failed and cancelled items to 'waiting') go first, in item order.
UPDATE workflow_node_jobs
   SET status = 'queued', run_after = now(), updated_at = now()
 WHERE id IN (SELECT id FROM workflow_node_jobs
               WHERE run_id = %(run_id)s AND map_node = %(node)s AND status = 'waiting'
               ORDER BY map_index
               LIMIT %(limit)s)
RETURNING id;

-- name: map_insert_items
-- Items start..stop-1, each the map row's own call, queue, model, attempts and resolved inputs
-- plus the item under its input name. Never twice: the unique (run_id, node_name).
WITH src AS MATERIALIZED (
    SELECT coalesce(
        CASE WHEN %(literal)s::jsonb IS NOT NULL THEN %(literal)s::jsonb
             WHEN %(source_node)s::text IS NULL
             THEN (SELECT r.context FROM workflow_runs r WHERE r.id = %(run_id)s) #> %(path)s::text[]
             ELSE (SELECT j.context_delta FROM workflow_node_jobs j
                    WHERE j.run_id = %(run_id)s AND j.node_name = %(source_node)s AND j.status = 'completed') #> %(path)s::text[]
        END,
        %(default)s::jsonb) AS list
)
INSERT INTO workflow_node_jobs (run_id, node_name, map_node, map_index, node_module, queue, status, priority,
                                required_model, inputs, input_refs, max_attempts, budget_seconds, retry_policy, concurrency_key, gpus, vram_gb,
                                trace_context)
SELECT p.run_id, p.node_name || '[' || i || ']', p.node_name, i, p.node_module, p.queue, 'queued', p.priority,
       p.required_model, p.inputs || jsonb_build_object(%(item_input)s::text, src.list -> i), p.input_refs,
       p.max_attempts, p.budget_seconds, p.retry_policy, p.concurrency_key, p.gpus, p.vram_gb, p.trace_context
  FROM workflow_node_jobs p, src, generate_series(%(start)s::int, %(stop)s::int - 1) AS i
 WHERE p.run_id = %(run_id)s AND p.node_name = %(node)s
 ORDER BY i
ON CONFLICT (run_id, node_name) DO NOTHING;

-- name: map_complete
-- The map's output, aggregated once in Postgres: the items' outputs in item order (null for a
-- failed one), and with allow_failures the failed items' indexes and errors.
UPDATE workflow_node_jobs p
   SET status = 'completed', context_delta = agg.output, error = NULL,
       started_at = coalesce(p.started_at, p.created_at), finished_at = now(), updated_at = now()
  FROM (SELECT jsonb_build_object('items', coalesce(jsonb_agg(CASE WHEN status = 'completed' THEN context_delta END ORDER BY map_index), '[]'::jsonb))
               || CASE WHEN %(allow_failures)s
                       THEN jsonb_build_object('failed', coalesce(jsonb_agg(jsonb_build_object('index', map_index, 'error', error) ORDER BY map_index)
                                                                  FILTER (WHERE status <> 'completed'), '[]'::jsonb))
                       ELSE '{}'::jsonb END AS output
          FROM workflow_node_jobs
         WHERE run_id = %(run_id)s AND map_node = %(node)s) agg
 WHERE p.id = %(id)s AND p.status = 'waiting'
RETURNING p.id;

-- name: map_fail
UPDATE workflow_node_jobs
   SET status = 'failed', error = %(error)s, started_at = coalesce(started_at, created_at), finished_at = now(), updated_at = now()
 WHERE id = %(id)s AND status = 'waiting'
RETURNING id;

-- name: map_cancel_open_items
-- The map failed: its items not started yet never will be (running ones finish and are ignored).
UPDATE workflow_node_jobs
   SET status = 'cancelled', error = %(reason)s, finished_at = now(), updated_at = now()
 WHERE run_id = %(run_id)s AND map_node = %(node)s AND status IN ('scheduled', 'queued', 'waiting');

-- name: map_progress
-- run_status: each map's items by state, from the map's own index, never as node rows.
SELECT map_node,
       count(*) FILTER (WHERE status = 'completed') AS done,
       count(*) FILTER (WHERE status = 'running') AS running,
       count(*) FILTER (WHERE status IN ('failed', 'cancelled')) AS failed
  FROM workflow_node_jobs_all  -- a completed run's items may have moved to history
 WHERE run_id = %(run_id)s AND map_node = ANY(%(nodes)s::text[])
 GROUP BY map_node;

-- name: map_stalled_runs
-- For the reconcile sweep: a waiting map none of whose items is live, in a run with no pending
-- event (both seen in one snapshot), moves only if its step runs again (an item's event lost).
-- `<> 'completed'` again lets the live-items probe use the partial index of open items.
SELECT r.id, r.status, r.reconcile_attempts
  FROM workflow_runs r
 WHERE r.id IN (SELECT p.run_id FROM workflow_node_jobs p
                 WHERE p.status = 'waiting' AND p.map_total IS NOT NULL
                   AND NOT EXISTS (SELECT 1 FROM workflow_node_jobs i
                                    WHERE i.run_id = p.run_id AND i.map_node = p.node_name AND i.status <> 'completed'
                                      AND i.status IN ('scheduled', 'queued', 'running')))
   AND r.status = 'running' AND r.poisoned_at IS NULL
   AND (r.reconcile_next_at IS NULL OR r.reconcile_next_at <= now())
   AND NOT EXISTS (SELECT 1 FROM workflow_dispatch_events e
                    WHERE e.run_id = r.id AND e.processed_at IS NULL AND e.poisoned_at IS NULL)
 ORDER BY r.id
 LIMIT %(limit)s
   FOR UPDATE OF r SKIP LOCKED;
