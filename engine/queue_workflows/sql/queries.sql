-- Named queries. `{table}`, `{result_column}` and `{order_by}` are filled only with
-- fixed identifiers and fragments from queue_workflows.queries; values are parameters.

-- name: enqueue_ingest_job
INSERT INTO ingest_jobs (task_name, queue, args, reason, priority, max_attempts)
VALUES (%(task_name)s, %(queue)s, %(args)s, %(reason)s, %(priority)s, %(max_attempts)s)
RETURNING *;

-- name: enqueue_ingest_job_once
-- With a dedup key: the live job with that key (or one finished within the window) if there
-- is one, else a new job. Two enqueuers racing on one key meet at the unique index: the
-- loser inserts nothing and finds the winner's job with `find_dedup_job`.
WITH existing AS (
    SELECT * FROM ingest_jobs
     WHERE dedup_key = %(dedup_key)s
       AND (status IN ('scheduled', 'queued', 'running')
            OR finished_at > now() - make_interval(secs => %(dedup_window_seconds)s))
     ORDER BY id DESC
     LIMIT 1
), inserted AS (
    INSERT INTO ingest_jobs (task_name, queue, args, reason, priority, max_attempts, dedup_key)
    SELECT %(task_name)s, %(queue)s, %(args)s, %(reason)s, %(priority)s, %(max_attempts)s, %(dedup_key)s
     WHERE NOT EXISTS (SELECT 1 FROM existing)
    ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL AND status IN ('scheduled', 'queued', 'running') DO NOTHING
    RETURNING *
)
SELECT * FROM inserted
UNION ALL
SELECT * FROM existing;

-- name: find_dedup_job
SELECT * FROM ingest_jobs
 WHERE dedup_key = %(dedup_key)s AND status IN ('scheduled', 'queued', 'running')
 ORDER BY id DESC
 LIMIT 1;

-- name: enqueue_ingest_jobs
INSERT INTO ingest_jobs (task_name, queue, args, reason, priority, max_attempts)
SELECT * FROM unnest(%(task_name)s::text[], %(queue)s::text[], %(args)s::jsonb[], %(reason)s::text[],
                     %(priority)s::integer[], %(max_attempts)s::integer[])
RETURNING *;

-- name: enqueue_node_job
-- A run_id naming no run inserts nothing (instead of a foreign-key error that would abort the
-- caller's transaction); a run made earlier in the caller's own transaction is seen.
INSERT INTO workflow_node_jobs (run_id, node_name, node_module, queue, priority, required_model, inputs, max_attempts)
SELECT %(run_id)s::bigint, %(node_name)s, %(node_module)s, %(queue)s, %(priority)s, %(required_model)s, %(inputs)s, %(max_attempts)s
 WHERE %(run_id)s::bigint IS NULL OR EXISTS (SELECT 1 FROM workflow_runs WHERE id = %(run_id)s::bigint)
RETURNING *;

-- name: claim_job
-- {plan} and {routing} are empty, or for a gpu worker the fixed `gpu_claim_plan` and
-- `gpu_routing` fragments below.
{plan}UPDATE {table} AS j
   SET status = 'running',
       claimed_by = %(worker_id)s,
       claim_lock_key = %(lock_key)s,
       attempts = j.attempts + 1,
       lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
       started_at = now(),
       updated_at = now()
 WHERE j.id = (
        SELECT c.id
          FROM {table} AS c
         WHERE c.status = 'queued' AND c.queue = %(queue)s {routing}
         ORDER BY {order_by}
           FOR UPDATE SKIP LOCKED
         LIMIT 1)
RETURNING j.*;

-- name: mark_completed
UPDATE {table}
   SET status = 'completed', {result_column} = %(result)s, error = NULL,
       lease_expires_at = NULL, finished_at = now(), updated_at = now()
 WHERE id = %(job_id)s
   AND status NOT IN ('completed', 'failed', 'cancelled')
   AND (%(worker_id)s::text IS NULL OR (claimed_by = %(worker_id)s AND status = 'running'))
RETURNING *;

-- name: mark_failed
UPDATE {table}
   SET status = 'failed', error = %(error)s,
       lease_expires_at = NULL, finished_at = now(), updated_at = now()
 WHERE id = %(job_id)s
   AND status NOT IN ('completed', 'failed', 'cancelled')
   AND (%(worker_id)s::text IS NULL OR (claimed_by = %(worker_id)s AND status = 'running'))
RETURNING *;

-- name: retry_job
-- A failed attempt with attempts left waits out a backoff delay as 'scheduled'.
UPDATE {table}
   SET status = 'scheduled', error = %(error)s, run_after = now() + make_interval(secs => %(delay_seconds)s),
       claimed_by = NULL, claim_lock_key = NULL, lease_expires_at = NULL, started_at = NULL, updated_at = now()
 WHERE id = %(job_id)s AND claimed_by = %(worker_id)s AND status = 'running' AND attempts < max_attempts
RETURNING *;

-- name: release_job
-- Hand running jobs back untouched (graceful stop, a batch's unstarted rows): no attempt charged.
-- Only a started row (started_at set) had its attempt charged, so only it gets one back.
UPDATE {table}
   SET status = 'queued', claimed_by = NULL, claim_lock_key = NULL, lease_expires_at = NULL,
       attempts = CASE WHEN started_at IS NULL THEN attempts ELSE greatest(attempts - 1, 0) END,
       started_at = NULL, updated_at = now()
 WHERE id = ANY(%(ids)s::bigint[]) AND claimed_by = %(worker_id)s AND status = 'running'
RETURNING id;

-- name: renew_lease
-- Every row the worker runs (one job, or a batch's rows); those it gets back are still its own.
UPDATE {table}
   SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s), updated_at = now()
 WHERE id = ANY(%(ids)s::bigint[]) AND claimed_by = %(worker_id)s AND status = 'running'
RETURNING id;

-- name: lockless_jobs
-- Running jobs whose worker no session speaks for any more: suspects, reclaimed only if
-- still lockless a moment later (a live worker restores a dropped connection within that).
-- A job claimed before the current server start lost its lock in the restart, not in a
-- crash: its worker gets the grace period to reconnect and retake the lock. (A batch row
-- not started yet has no started_at: its claim or last renewal stands in.)
SELECT j.id
  FROM {table} j
 WHERE j.status = 'running'
   AND j.claim_lock_key IS NOT NULL
   AND (coalesce(j.started_at, j.updated_at) > pg_postmaster_start_time()
        OR pg_postmaster_start_time() < now() - make_interval(secs => %(session_grace_seconds)s))
   AND j.claim_lock_key::bigint NOT IN (SELECT lock_key FROM qw_worker_sessions);

-- name: sweep_has_work
-- Whether the reclaim sweep has anything to act on: a running job (its worker may die) or a
-- delayed job now due. An idle leader asks only this, every interval, instead of the whole sweep.
SELECT EXISTS (SELECT 1 FROM workflow_node_jobs WHERE status = 'running')
    OR EXISTS (SELECT 1 FROM ingest_jobs WHERE status = 'running')
    OR EXISTS (SELECT 1 FROM workflow_node_jobs WHERE status = 'scheduled' AND run_after <= now())
    OR EXISTS (SELECT 1 FROM ingest_jobs WHERE status = 'scheduled' AND run_after <= now()) AS busy;

-- name: reclaim_orphans
-- The one recovery path for a running job whose worker is gone: a suspect that still has
-- no session holding its worker's lock (the process died), or a lapsed lease (the host vanished).
-- A batch row never recorded as started goes back uncharged, flagged batch_suspect: it may
-- have run (and killed its worker) between two progress records, so next time its start is
-- recorded before it runs.
WITH orphans AS (
    SELECT j.id, j.claimed_by
      FROM {table} j
     WHERE j.status = 'running'
       AND (j.lease_expires_at < now()
            OR (j.id = ANY(%(suspects)s::bigint[])
                AND j.claim_lock_key::bigint NOT IN (SELECT lock_key FROM qw_worker_sessions)))
       FOR UPDATE SKIP LOCKED
)
UPDATE {table} j
   SET status = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'queued' END,
       error = CASE WHEN j.attempts >= j.max_attempts
                    THEN format('abandoned after %%s attempts: worker %%s died or lost its lease', j.attempts, o.claimed_by)
                    ELSE j.error END,
       finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END,
       batch_suspect = j.batch_suspect OR j.started_at IS NULL,
       claimed_by = NULL, claim_lock_key = NULL, lease_expires_at = NULL, updated_at = now()
  FROM orphans o
 WHERE j.id = o.id
RETURNING j.id, j.queue, j.status, j.attempts, o.claimed_by AS lost_by;

-- name: queue_counts
SELECT queue, status, count(*) AS n,
       extract(epoch FROM now() - min(created_at) FILTER (WHERE status = 'queued'))::float AS oldest_queued_s
  FROM {table}
 GROUP BY queue, status;

-- name: live_workers
SELECT h.queue, count(*) AS n
  FROM worker_heartbeats h
 WHERE h.last_seen > now() - make_interval(secs => %(stale_after_seconds)s)
   AND h.lock_key IN (SELECT lock_key FROM qw_worker_sessions)
 GROUP BY h.queue;

-- name: next_worker_lock_key
SELECT nextval('worker_lock_key_seq')::integer AS lock_key;

-- name: acquire_session_lock
-- Shared, so the worker's two connections can both hold it; keys come from a sequence.
SELECT pg_try_advisory_lock_shared(%(lock_namespace)s::integer, %(lock_key)s::integer) AS acquired;

-- name: take_idle_baton
-- A queue's idle baton: of its idle workers only the holder is woken by NOTIFY and claims; the
-- others wait here, in line, at most `wait_ms`; false when the wait ran out (migration 0032).
SELECT qw_take_idle_baton(%(baton_namespace)s::integer, %(queue)s, %(wait_ms)s::integer) AS taken;

-- name: serialize_gpu_claims
-- Taken before a routed gpu claim, in its transaction: the claim's plan then sees every earlier
-- claim committed (a model another worker has just started loading counts as held). The claim's
-- generic plan is index probes whatever the parameters; without this setting Postgres would
-- plan the long statement afresh on every claim, which costs more than running it.
SELECT pg_advisory_xact_lock(%(lock_namespace)s::integer, hashtext(%(queue)s)),
       set_config('plan_cache_mode', 'force_generic_plan', true);

-- name: release_idle_baton
SELECT pg_advisory_unlock(%(baton_namespace)s::integer, hashtext(%(queue)s)) AS released;

-- name: upsert_heartbeat
INSERT INTO worker_heartbeats (worker_id, host_label, queue, pid, lock_key, state, current_job_id, loaded_models, swapping,
                               vram_total_gb, vram_free_gb, last_seen)
VALUES (%(worker_id)s, %(host_label)s, %(queue)s, %(pid)s, %(lock_key)s, %(state)s, %(current_job_id)s,
        %(loaded_models)s::text[], %(swapping)s, %(vram_total_gb)s, %(vram_free_gb)s, now())
ON CONFLICT (worker_id) DO UPDATE
   SET state = EXCLUDED.state, current_job_id = EXCLUDED.current_job_id, loaded_models = EXCLUDED.loaded_models,
       swapping = EXCLUDED.swapping, vram_total_gb = EXCLUDED.vram_total_gb, vram_free_gb = EXCLUDED.vram_free_gb,
       lock_key = EXCLUDED.lock_key, last_seen = now(), last_flagged_dead_at = NULL;

-- name: delete_heartbeat
DELETE FROM worker_heartbeats WHERE worker_id = %(worker_id)s;

-- name: promote_due_jobs
-- Delayed jobs whose time has come become claimable; the requeue trigger wakes workers.
UPDATE {table} j
   SET status = 'queued', updated_at = now()
  FROM (SELECT id FROM {table}
         WHERE status = 'scheduled' AND run_after <= now()
           AND (%(queue)s::text IS NULL OR queue = %(queue)s)
         ORDER BY run_after
         LIMIT %(limit)s
           FOR UPDATE SKIP LOCKED) due
 WHERE j.id = due.id
RETURNING j.id;

-- name: prune_dead_heartbeats
-- Heartbeat rows of workers that are gone: stale, and no session holds their lock.
DELETE FROM worker_heartbeats
 WHERE last_seen < now() - make_interval(secs => %(stale_after_seconds)s)
   AND lock_key NOT IN (SELECT lock_key FROM qw_worker_sessions)
RETURNING worker_id;

-- name: watchdog_trip
-- A watchdog stopped the job: requeue it (no attempt charged) while watchdog retries
-- remain, else fail it. Only the owner's running job matches; as in release_job, only a
-- started row (started_at set) had an attempt charged to give back.
UPDATE {table}
   SET status = CASE WHEN watchdog_trips + 1 < %(max_trips)s THEN 'queued' ELSE 'failed' END,
       attempts = CASE WHEN watchdog_trips + 1 < %(max_trips)s AND started_at IS NOT NULL THEN greatest(attempts - 1, 0)
                       ELSE attempts END,
       watchdog_trips = watchdog_trips + 1,
       error = %(error)s,
       finished_at = CASE WHEN watchdog_trips + 1 < %(max_trips)s THEN NULL ELSE now() END,
       claimed_by = CASE WHEN watchdog_trips + 1 < %(max_trips)s THEN NULL ELSE claimed_by END,
       claim_lock_key = NULL, lease_expires_at = NULL, updated_at = now()
 WHERE id = %(job_id)s AND claimed_by = %(worker_id)s AND status = 'running'
RETURNING id, status, watchdog_trips;

-- name: upsert_worker_control
INSERT INTO worker_controls (host_label, queue, desired_state, stop_policy, requested_by, reason)
VALUES (%(host_label)s, %(queue)s, %(desired_state)s, %(stop_policy)s, %(requested_by)s, %(reason)s)
ON CONFLICT (host_label, queue) DO UPDATE
   SET desired_state = EXCLUDED.desired_state, stop_policy = EXCLUDED.stop_policy,
       requested_by = EXCLUDED.requested_by, reason = EXCLUDED.reason, updated_at = now()
RETURNING *;

-- name: worker_control_for
SELECT desired_state, stop_policy, requested_by, reason, device_check_pending, updated_at
  FROM worker_controls WHERE host_label = %(host_label)s AND queue = %(queue)s;

-- name: set_device_check
-- The row may not exist yet (absent means ON): create it ON, with only the flag changed.
INSERT INTO worker_controls (host_label, queue, device_check_pending)
VALUES (%(host_label)s, %(queue)s, %(pending)s)
ON CONFLICT (host_label, queue) DO UPDATE SET device_check_pending = EXCLUDED.device_check_pending;

-- name: list_worker_controls
SELECT * FROM worker_controls ORDER BY host_label, queue;

-- name: flag_dead_workers
-- Workers whose heartbeat went stale while they still own a running job: a wedged process
-- (a GPU hang can stop every thread in it). The lease reclaims the job; this names the process.
WITH owned AS (
    SELECT claimed_by, id FROM workflow_node_jobs WHERE status = 'running'
    UNION ALL
    SELECT claimed_by, id FROM ingest_jobs WHERE status = 'running'
)
UPDATE worker_heartbeats h
   SET last_flagged_dead_at = now()
  FROM owned o
 WHERE o.claimed_by = h.worker_id
   AND h.last_seen < now() - make_interval(secs => %(stale_after_seconds)s)
   AND h.last_flagged_dead_at IS NULL
RETURNING h.worker_id, h.host_label, h.queue, h.pid, o.id AS job_id,
          extract(epoch FROM now() - h.last_seen)::float AS silent_seconds;

-- name: worker_list
SELECT h.worker_id, h.host_label, h.queue, h.pid, h.state, h.current_job_id, h.started_at, h.last_seen,
       extract(epoch FROM now() - h.last_seen)::float AS last_seen_s,
       h.last_flagged_dead_at,
       h.lock_key IN (SELECT lock_key FROM qw_worker_sessions) AS connected
  FROM worker_heartbeats h
 ORDER BY h.host_label, h.queue, h.worker_id;

-- name: list_jobs
SELECT * FROM (
    SELECT 'ingest' AS family, id, queue, task_name AS name, status, attempts, max_attempts, watchdog_trips,
           claimed_by, created_at, started_at, finished_at, error
      FROM ingest_jobs
     WHERE (%(queue)s::text IS NULL OR queue = %(queue)s) AND (%(status)s::text IS NULL OR status = %(status)s)
    UNION ALL
    SELECT 'node', id, queue, node_name, status, attempts, max_attempts, watchdog_trips,
           claimed_by, created_at, started_at, finished_at, error
      FROM workflow_node_jobs
     WHERE (%(queue)s::text IS NULL OR queue = %(queue)s) AND (%(status)s::text IS NULL OR status = %(status)s)
) jobs
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;

-- name: get_job
SELECT * FROM {table} WHERE id = %(job_id)s;

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

-- name: schedule_now
SELECT clock_timestamp() AS now;

-- name: schedule_claim_slot
-- The replica whose row lands enqueues the slot's job in this same transaction; a racing
-- replica waits on the uncommitted row, then inserts nothing (or, if the winner rolled back
-- or died, inserts after all). Nothing back: the slot is already taken.
INSERT INTO schedule_slots (entry_name, slot_time, kind, task_name, queue, enqueued_by)
VALUES (%(entry_name)s, %(slot_time)s, %(kind)s, %(task_name)s, %(queue)s, %(enqueued_by)s)
ON CONFLICT (entry_name, slot_time) DO NOTHING
RETURNING *;

-- name: schedule_lock_entry
-- Serialises boot kicks of one entry; a separate statement, so the boot insert that follows
-- takes its snapshot after the lock (and sees a kick another replica just committed).
SELECT pg_advisory_xact_lock(hashtext('queue_workflows:schedule:' || %(entry_name)s));

-- name: schedule_claim_boot
-- A boot kick, unless one for this entry ran within the boot window.
INSERT INTO schedule_slots (entry_name, slot_time, kind, task_name, queue, enqueued_by)
SELECT %(entry_name)s, %(slot_time)s, 'boot', %(task_name)s, %(queue)s, %(enqueued_by)s
 WHERE NOT EXISTS (
       SELECT 1 FROM schedule_slots
        WHERE entry_name = %(entry_name)s AND kind = 'boot'
          AND slot_time > %(slot_time)s - make_interval(secs => %(window_seconds)s))
ON CONFLICT (entry_name, slot_time) DO NOTHING
RETURNING *;

-- name: schedule_set_job
UPDATE schedule_slots SET job_id = %(job_id)s WHERE entry_name = %(entry_name)s AND slot_time = %(slot_time)s;

-- name: schedule_last_slots
-- Per entry, the latest row of the given kinds.
SELECT DISTINCT ON (entry_name) entry_name, slot_time, kind, job_id, enqueued_by, created_at
  FROM schedule_slots
 WHERE kind = ANY(%(kinds)s::text[])
 ORDER BY entry_name, slot_time DESC;

-- name: schedule_prune
-- Old ledger rows, always keeping each entry's latest slot (the catch-up policy reads it).
DELETE FROM schedule_slots s
 WHERE s.slot_time < %(before)s
   AND s.slot_time < (SELECT max(l.slot_time) FROM schedule_slots l WHERE l.entry_name = s.entry_name AND l.kind <> 'boot');

-- name: list_runs
SELECT r.id, r.workflow_name, r.status, r.created_at, r.finished_at, r.error,
       count(n.id) FILTER (WHERE n.status = 'completed') AS completed,
       count(n.id) FILTER (WHERE n.status IN ('queued', 'scheduled', 'running', 'awaiting_input')) AS active,
       count(n.id) FILTER (WHERE n.status = 'failed') AS failed,
       count(n.id) AS nodes_started,
       coalesce(jsonb_array_length(r.definition -> 'nodes'), 0) AS nodes_total
  FROM workflow_runs r
  LEFT JOIN workflow_node_jobs n ON n.run_id = r.id
 WHERE %(status)s::text IS NULL OR r.status = %(status)s
 GROUP BY r.id
 ORDER BY r.id DESC
 LIMIT %(limit)s;

-- Batch mode (queue_workflows.batch) ------------------------------------------------------

-- name: claim_batch
-- Up to %(limit)s rows in one statement, but no more than this worker's share of what is
-- queued (depth over the queue's live workers, rounded up), so a batch never leaves its peers
-- idle on a short queue. The depth count stops at limit x workers: it stays cheap at any backlog.
-- The rows are leased but not started: no attempt is charged (started_at stays NULL) until
-- a row's start is recorded (start_batch_row, charge_batch_rows), so a crash charges only
-- rows that ran. RETURNING has no order of its own: the rows come back in claim order, the
-- order they are to run in.
WITH peers AS (
    SELECT greatest(count(*), 1) AS n FROM worker_heartbeats WHERE queue = %(queue)s
), depth AS (
    SELECT count(*) AS n
      FROM (SELECT 1 FROM {table} WHERE status = 'queued' AND queue = %(queue)s
             LIMIT %(limit)s::bigint * (SELECT n FROM peers)) AS q
), claimed AS (
    UPDATE {table} AS j
       SET status = 'running',
           claimed_by = %(worker_id)s,
           claim_lock_key = %(lock_key)s,
           lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
           started_at = NULL,
           updated_at = now()
     WHERE j.id IN (
            SELECT id
              FROM {table}
             WHERE status = 'queued' AND queue = %(queue)s
             ORDER BY {order_by}
               FOR UPDATE SKIP LOCKED
             LIMIT greatest(1, least(%(limit)s, ceil((SELECT n FROM depth)::numeric / (SELECT n FROM peers))))::int)
    RETURNING j.*
)
SELECT * FROM claimed ORDER BY {order_by};

-- name: start_batch_row
-- A suspect batch row (batch_suspect) starts: its start is recorded, and its attempt charged,
-- before its code runs, after charge_batch_rows and the outcomes of the rows finished since
-- the last record, in one round trip. Repeating it charges nothing more; no row back means
-- the row is no longer the caller's, so it must not run. Its transaction commits without
-- waiting for the disk (`async`): a killed worker cannot lose what the server has committed;
-- only a server crash could, and then those rows merely run again.
WITH async AS (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
)
UPDATE {table}
   SET attempts = attempts + CASE WHEN started_at IS NULL THEN 1 ELSE 0 END,
       started_at = coalesce(started_at, now()), updated_at = now()
 WHERE id = %(job_id)s AND claimed_by = %(worker_id)s AND status = 'running'
   AND (SELECT setting FROM async) = 'off'
RETURNING id, attempts;

-- name: async_commit
-- A batch's progress record: a killed worker cannot lose what the server has committed;
-- only a server crash could, and then those rows merely run again.
SET LOCAL synchronous_commit = off;

-- name: charge_batch_rows
-- Rows that have started since the last record: their attempt is charged (once: started_at
-- guards it), so a crash now blames them and release_job refunds them.
UPDATE {table}
   SET attempts = attempts + 1, started_at = now(), updated_at = now()
 WHERE id = ANY(%(ids)s::bigint[]) AND claimed_by = %(worker_id)s AND status = 'running' AND started_at IS NULL
RETURNING id;

-- name: complete_batch
-- A batch's successes in one statement; a row no longer the caller's is left alone (and not returned).
-- A row not yet charged (its start not on record) is charged here, in the same write.
UPDATE {table} AS j
   SET status = 'completed', {result_column} = v.result, error = NULL,
       attempts = j.attempts + CASE WHEN j.started_at IS NULL THEN 1 ELSE 0 END,
       started_at = coalesce(j.started_at, now()),
       lease_expires_at = NULL, finished_at = now(), updated_at = now()
  FROM unnest(%(ids)s::bigint[], %(results)s::jsonb[]) AS v(id, result)
 WHERE j.id = v.id AND j.claimed_by = %(worker_id)s AND j.status = 'running'
RETURNING j.id;

-- name: copy_ingest_jobs
-- Bulk enqueue of validated rows (node_queue.copy_ingest_jobs), columns in _INGEST_ARGS order.
COPY ingest_jobs (task_name, queue, args, reason, priority, max_attempts) FROM STDIN;

-- name: record_usage
-- What the job cost its process (queue_workflows.usage), written just before its terminal mark.
UPDATE {table}
   SET cpu_seconds = %(cpu_seconds)s, peak_rss_bytes = %(peak_rss_bytes)s, peak_vram_bytes = %(peak_vram_bytes)s,
       model_load_seconds = %(model_load_seconds)s, model_hit = %(model_hit)s, wall_seconds = %(wall_seconds)s
 WHERE id = %(job_id)s AND claimed_by = %(worker_id)s AND status = 'running';

-- name: gpu_routing
-- A gpu worker's claim filter (docs/gpu.md, "Routing"): only the plan's candidates, the next job
-- of each model it holds or may load and of the jobs needing no model; ORDER BY picks among them.
AND c.id = ANY(ARRAY(SELECT cd.id FROM candidates AS cd))

-- name: gpu_claim_plan
-- The WITH clause of a gpu worker's claim (docs/gpu.md, "Routing"). `plan` is one row, computed
-- once per claim, naming the models this worker may load, best first (`ranked`), and those of
-- them no other live worker could fit, when there is another (`sole`). A model must fit this
-- worker's VRAM; one another live worker holds (warm, or running a job for it, which covers a
-- load under way) is left to it unless the queue is deep enough for another copy:
-- second_copy_backlog jobs per holder and, once the model's recent jobs say how long a job and a
-- load take, more queued work than one load per holder. Ranked: models fewer other workers can
-- fit first, then models fewer others hold, then the model whose next job is oldest.
-- Every step is an index probe per model (workflow_node_jobs_model_claim_idx), never a read of the
-- backlog: each queued model's next job by a loose index scan, and a holder's queue counted
-- only as far as the rule needs.
WITH RECURSIVE queued_models AS (
     -- Each model's next job in claim order: ordered by the index's own columns, so only
     -- workflow_node_jobs_model_claim_idx can answer, one probe per model.
     (SELECT q.required_model AS model, q.id AS next_id FROM {table} AS q
       WHERE q.queue = %(queue)s AND q.status = 'queued' AND q.required_model IS NOT NULL
       ORDER BY q.required_model, {head_order} LIMIT 1)
     UNION ALL
     SELECT nx.model, nx.next_id
       FROM queued_models AS m,
            LATERAL (SELECT q.required_model AS model, q.id AS next_id FROM {table} AS q
                      WHERE q.queue = %(queue)s AND q.status = 'queued' AND q.required_model > m.model
                      ORDER BY q.required_model, {head_order} LIMIT 1) AS nx
 ), others AS (
     SELECT h.worker_id, h.loaded_models, h.swapping, h.vram_free_gb,
            coalesce((SELECT sum(g.est_vram_gb) FROM gpu_models g WHERE g.model_id = ANY(h.loaded_models)), 0) AS held_gb
       FROM worker_heartbeats h
      WHERE h.queue = %(queue)s AND h.worker_id <> %(worker_id)s AND h.state IN ('idle', 'busy')
        AND h.lock_key IN (SELECT lock_key FROM qw_worker_sessions)
 ), running_on AS (
     SELECT DISTINCT r.claimed_by AS worker_id, r.required_model AS model
       FROM {table} AS r
      WHERE r.status = 'running' AND r.queue = %(queue)s AND r.required_model IS NOT NULL
 ), scored AS MATERIALIZED (
     SELECT q.model, q.next_id, m.est_vram_gb,
            (SELECT count(*) FROM others o
              WHERE (NOT o.swapping AND o.loaded_models @> ARRAY[q.model])
                 OR EXISTS (SELECT 1 FROM running_on ro WHERE ro.worker_id = o.worker_id AND ro.model = q.model)) AS holders,
            (SELECT count(*) FROM others o
              WHERE o.vram_free_gb IS NULL OR m.est_vram_gb IS NULL OR m.est_vram_gb <= o.vram_free_gb + o.held_gb) AS fitters,
            (SELECT avg(d.wall_seconds) FROM (
                 SELECT f.wall_seconds FROM {table} AS f
                  WHERE f.required_model = q.model AND f.model_hit AND f.finished_at IS NOT NULL
                  ORDER BY f.finished_at DESC LIMIT 20) AS d) AS job_seconds,
            (SELECT avg(d.model_load_seconds) FROM (
                 SELECT f.model_load_seconds FROM {table} AS f
                  WHERE f.required_model = q.model AND NOT f.model_hit AND f.finished_at IS NOT NULL
                  ORDER BY f.finished_at DESC LIMIT 5) AS d) AS load_seconds
       FROM queued_models AS q LEFT JOIN gpu_models AS m ON m.model_id = q.model
 ), needs AS (
     SELECT s.*, s.holders * %(second_copy_backlog)s AS by_copies,
            CASE WHEN s.job_seconds > 0 AND s.load_seconds IS NOT NULL
                 THEN least(floor(s.holders * s.load_seconds / s.job_seconds) + 1, 1000000) ELSE 0 END AS by_work
       FROM scored AS s
      WHERE (%(vram_available_gb)s::float IS NULL OR coalesce(s.est_vram_gb, 0) <= %(vram_available_gb)s::float)
 ), counted AS (
     SELECT nd.*,
            CASE WHEN nd.holders = 0 THEN NULL
                 ELSE (SELECT count(*) FROM (  -- the ORDER BY keeps this on the model's index too
                          SELECT 1 FROM {table} AS q
                           WHERE q.queue = %(queue)s AND q.status = 'queued' AND q.required_model = nd.model
                           ORDER BY q.required_model, {head_order}
                           LIMIT greatest(nd.by_copies, nd.by_work)::bigint) AS z)
            END AS n
       FROM needs AS nd
 ), allowed AS (
     SELECT ct.* FROM counted AS ct
      WHERE ct.holders = 0
         OR (ct.n >= ct.by_copies
             AND (ct.job_seconds IS NULL OR ct.load_seconds IS NULL OR ct.n * ct.job_seconds > ct.holders * ct.load_seconds))
 ), plan AS MATERIALIZED (
     SELECT coalesce(array_agg(a.model ORDER BY a.fitters, a.holders, a.next_id), '{{}}') AS ranked,
            coalesce(array_agg(a.model) FILTER (WHERE a.fitters = 0 AND EXISTS (SELECT 1 FROM others)), '{{}}') AS sole
       FROM allowed AS a
 ), candidates AS (
     SELECT s.next_id AS id FROM scored AS s, plan AS p
      WHERE s.model = ANY(%(loaded_models)s::text[]) OR s.model = ANY(p.ranked)
     UNION ALL
     (SELECT q.id FROM {table} AS q
       WHERE q.queue = %(queue)s AND q.status = 'queued' AND q.required_model IS NULL
       ORDER BY q.required_model, {head_order} LIMIT 1)
 )

-- name: upsert_gpu_model
INSERT INTO gpu_models (model_id, est_vram_gb) VALUES (%(model_id)s, %(est_vram_gb)s)
ON CONFLICT (model_id) DO UPDATE SET est_vram_gb = EXCLUDED.est_vram_gb, updated_at = now();

-- name: flag_unassignable
-- Queued gpu jobs whose model needs more VRAM than the largest live gpu worker has get a reason;
-- the reason goes when one that fits appears. Nothing is decided while no live worker reports VRAM.
WITH largest AS (
    SELECT max(h.vram_total_gb) AS gb FROM worker_heartbeats h
     WHERE h.queue = 'gpu' AND h.vram_total_gb IS NOT NULL AND h.lock_key IN (SELECT lock_key FROM qw_worker_sessions)
), verdict AS (
    SELECT j.id,
           CASE WHEN m.est_vram_gb > l.gb
                THEN format('model %%s needs about %%s GB of VRAM; the largest live gpu worker has %%s GB', j.required_model, m.est_vram_gb, round(l.gb::numeric, 1))
           END AS reason
      FROM workflow_node_jobs j JOIN gpu_models m ON m.model_id = j.required_model CROSS JOIN largest l
     WHERE j.queue = 'gpu' AND j.status = 'queued' AND l.gb IS NOT NULL
)
UPDATE workflow_node_jobs j SET unassignable_reason = v.reason
  FROM verdict v
 WHERE j.id = v.id AND j.unassignable_reason IS DISTINCT FROM v.reason
RETURNING j.id, j.required_model, j.unassignable_reason;
