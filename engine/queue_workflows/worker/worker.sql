-- Named queries of a claim worker (queue_workflows.worker): its claim, session lock, idle baton, heartbeat and usage.
-- `{table}` and `{result_column}` are bound only to a job table's fixed identifiers (common.sqlfile); values are parameters.
-- `{plan}`, `{fair}`, `{bands}`, `{charge}`, `{order_by}` and `{routing}` are fixed fragments from queue_workflows.queries.

-- name: claim_job
-- {plan} is empty, or for a gpu worker the fixed `gpu_claim_plan` fragment; {fair}, {bands} and
-- {charge} are fair/fair.sql's: tenants in fair order, each tenant's bands in aged priority order,
-- the first band that yields an unlocked row wins, and {routing} (gpu_routing, or empty) filters
-- within a band.
-- The flow_limits lines are the admission (docs/flow_control.md): on a queue with no limit each is
-- one probe of an empty index, paid once per claim; otherwise a candidate's key must not be among
-- the queue's full keys (qw_flow_blocked, computed once per claim) and the trigger qw_flow_admit
-- has the last word. {clear_unassignable}: sqlfile.clear_unassignable (empty for ingest_jobs);
-- {reserve}: a routed gpu claim's VRAM reservation (gpu/claim.sql, gpu_reserve), else empty.
-- {note}: the claimed row becomes its band's floor in this session (fair_bands), except on a routed
-- gpu claim, which passes over rows that other workers (or this one, with other models) may take.
WITH RECURSIVE {plan}{fair}, claimed AS (
UPDATE {table} AS j
   SET status = 'running', {clear_unassignable} {reserve}
       claimed_by = %(worker_id)s,
       claim_lock_key = %(lock_key)s,
       attempts = j.attempts + 1,
       lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
       started_at = now(),
       updated_at = now(),
       flow_scope = CASE WHEN (SELECT EXISTS (SELECT FROM flow_limits AS fl WHERE fl.queue = %(queue)s)) THEN qw_flow_scope(j) END
 WHERE j.id = (
        SELECT c.id
          FROM fair_tenants AS f CROSS JOIN LATERAL ({bands}) AS fb CROSS JOIN LATERAL (
               SELECT c.id
                 FROM {table} AS c
                WHERE c.status = 'queued' AND c.queue = %(queue)s AND c.tenant = f.tenant AND c.priority = fb.priority
                  AND c.id >= fb.floor AND (c.queue, c.tenant, c.priority, c.id) >= (%(queue)s, f.tenant, fb.priority, fb.floor) {routing}
                  AND ((SELECT NOT EXISTS (SELECT FROM flow_limits AS fl WHERE fl.queue = %(queue)s))
                       OR NOT ARRAY[qw_flow_tag(c, (SELECT qw_flow_path(%(queue)s)), (SELECT qw_flow_tasks(%(queue)s))),
                                 qw_flow_held(c, (SELECT qw_flow_tasks(%(queue)s)))] && (SELECT qw_flow_blocked(%(queue)s)))
                ORDER BY {order_by}
                  FOR UPDATE SKIP LOCKED
                LIMIT 1) AS c
         LIMIT 1)
RETURNING j.*
), {charge}
SELECT * FROM claimed WHERE {note};

-- name: next_worker_lock_key
SELECT nextval('worker_lock_key_seq')::integer AS lock_key;

-- name: acquire_session_lock
-- Shared, so the worker's two connections can both hold it; keys come from a sequence.
SELECT pg_try_advisory_lock_shared(%(lock_namespace)s::integer, %(lock_key)s::integer) AS acquired;

-- name: acquire_fresh_session_lock
-- A newly drawn key is the worker's only when no other session holds it at all (any role may take
-- an advisory key ahead of us): taken exclusively first, then shared, then the exclusive let go.
SELECT CASE WHEN NOT pg_try_advisory_lock(%(lock_namespace)s::integer, %(lock_key)s::integer) THEN false
            WHEN NOT pg_try_advisory_lock_shared(%(lock_namespace)s::integer, %(lock_key)s::integer) THEN false
            ELSE pg_advisory_unlock(%(lock_namespace)s::integer, %(lock_key)s::integer) END AS acquired;

-- name: take_idle_baton
-- A queue's idle baton: of its idle workers only the holder is woken by NOTIFY and claims; the
-- others wait here, in line, at most `wait_ms`; false when the wait ran out (migration 0032).
SELECT qw_take_idle_baton(%(baton_namespace)s::integer, %(queue)s, %(wait_ms)s::integer) AS taken;

-- name: end_idle_baton_wait
-- Sent after take_idle_baton in the same transaction: a wait that took the baton leaves its short
-- lock_timeout set, and the look that follows must not give up behind a DDL lock at it.
SET LOCAL lock_timeout TO DEFAULT;

-- name: wake_on_every_enqueue
-- A queue whose idle workers all listen (no baton) is announced on every enqueue, not only to a baton holder.
INSERT INTO qw_wake_every_enqueue (queue) VALUES (%(queue)s) ON CONFLICT (queue) DO NOTHING;

-- name: release_idle_baton
SELECT pg_advisory_unlock(%(baton_namespace)s::integer, hashtext(%(queue)s)) AS released;

-- name: upsert_heartbeat
INSERT INTO worker_heartbeats (worker_id, host_label, queue, pid, lock_key, state, current_job_id, loaded_models, swapping,
                               vram_total_gb, vram_free_gb, gpu_devices, last_seen)
VALUES (%(worker_id)s, %(host_label)s, %(queue)s, %(pid)s, %(lock_key)s, %(state)s, %(current_job_id)s,
        %(loaded_models)s::text[], %(swapping)s, %(vram_total_gb)s, %(vram_free_gb)s, %(gpu_devices)s::jsonb, now())
ON CONFLICT (worker_id) DO UPDATE
   SET state = EXCLUDED.state, current_job_id = EXCLUDED.current_job_id, loaded_models = EXCLUDED.loaded_models,
       swapping = EXCLUDED.swapping, vram_total_gb = EXCLUDED.vram_total_gb, vram_free_gb = EXCLUDED.vram_free_gb,
       gpu_devices = EXCLUDED.gpu_devices,
       lock_key = EXCLUDED.lock_key, last_seen = now(), last_flagged_dead_at = NULL;

-- name: delete_heartbeat
DELETE FROM worker_heartbeats WHERE worker_id = %(worker_id)s;

-- name: complete_job
-- A completed job's terminal mark with what it cost its process folded in: one row version per
-- completion. Fenced as mark_completed with a worker id: only the claimant's running row matches.
UPDATE {table}
   SET status = 'completed', {result_column} = %(result)s, error = NULL, {clear_unassignable}
       lease_expires_at = NULL, finished_at = now(), updated_at = now(),
       cpu_seconds = %(cpu_seconds)s, peak_rss_bytes = %(peak_rss_bytes)s, peak_vram_bytes = %(peak_vram_bytes)s,
       model_load_seconds = %(model_load_seconds)s, model_hit = %(model_hit)s, wall_seconds = %(wall_seconds)s
 WHERE id = %(job_id)s AND claimed_by = %(worker_id)s AND status = 'running'
RETURNING *;

-- name: record_usage
-- What the job cost its process (queue_workflows.worker.usage), written just before a failure's
-- retry-or-fail pair or an out-of-memory requeue; a completion folds it in (complete_job).
UPDATE {table}
   SET cpu_seconds = %(cpu_seconds)s, peak_rss_bytes = %(peak_rss_bytes)s, peak_vram_bytes = %(peak_vram_bytes)s,
       model_load_seconds = %(model_load_seconds)s, model_hit = %(model_hit)s, wall_seconds = %(wall_seconds)s
 WHERE id = %(job_id)s AND claimed_by = %(worker_id)s AND status = 'running';
