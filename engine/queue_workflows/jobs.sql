-- Named queries of job rows in both job tables (queue_workflows.jobstore, .node_queue, .bulk): enqueue, terminal marks, lease.
-- `{table}` and `{result_column}` are bound only to a job table's fixed identifiers (common.sqlfile); values are parameters.

-- name: enqueue_ingest_job
INSERT INTO ingest_jobs (task_name, queue, args, reason, priority, max_attempts, concurrency_key, tenant, trace_context)
VALUES (%(task_name)s, %(queue)s, %(args)s, %(reason)s, %(priority)s, %(max_attempts)s, %(concurrency_key)s, %(tenant)s, %(trace_context)s)
RETURNING *;

-- name: enqueue_ingest_job_once
-- With a dedup key: the live job with that key (or one finished within the window) if there
-- is one, else a new job. Two enqueuers racing on one key meet at the unique index: the
-- loser inserts nothing and finds the winner's job with `find_dedup_job`.
WITH existing AS (
    SELECT * FROM ingest_jobs_all  -- a job finished within the window may have moved to history
     WHERE dedup_key = %(dedup_key)s
       AND (status IN ('scheduled', 'queued', 'running')
            OR finished_at > now() - make_interval(secs => %(dedup_window_seconds)s))
     ORDER BY id DESC
     LIMIT 1
), inserted AS (
    INSERT INTO ingest_jobs (task_name, queue, args, reason, priority, max_attempts, dedup_key, concurrency_key, tenant, trace_context)
    SELECT %(task_name)s, %(queue)s, %(args)s, %(reason)s, %(priority)s, %(max_attempts)s, %(dedup_key)s, %(concurrency_key)s, %(tenant)s,
           %(trace_context)s
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
-- The items of one call share its enqueue span's trace context.
INSERT INTO ingest_jobs (task_name, queue, args, reason, priority, max_attempts, concurrency_key, tenant, trace_context)
SELECT u.*, %(trace_context)s::jsonb
  FROM unnest(%(task_name)s::text[], %(queue)s::text[], %(args)s::jsonb[], %(reason)s::text[],
              %(priority)s::integer[], %(max_attempts)s::integer[], %(concurrency_key)s::text[], %(tenant)s::text[]) AS u
RETURNING *;

-- name: enqueue_node_job
-- A run_id naming no run inserts nothing (instead of a foreign-key error that would abort the
-- caller's transaction); a run made earlier in the caller's own transaction is seen.
INSERT INTO workflow_node_jobs (run_id, node_name, node_module, queue, priority, required_model, inputs, max_attempts, retry_policy,
                                concurrency_key, tenant, vram_gb, gpus, trace_context)
SELECT %(run_id)s::bigint, %(node_name)s, %(node_module)s, %(queue)s, %(priority)s, %(required_model)s, %(inputs)s, %(max_attempts)s,
       %(retry_policy)s, %(concurrency_key)s, %(tenant)s, %(vram_gb)s, %(gpus)s, %(trace_context)s
 WHERE %(run_id)s::bigint IS NULL OR EXISTS (SELECT 1 FROM workflow_runs WHERE id = %(run_id)s::bigint)
RETURNING *;

-- name: copy_ingest_jobs
-- Bulk enqueue of validated rows (node_queue.copy_ingest_jobs), columns in _INGEST_ARGS order.
COPY ingest_jobs (task_name, queue, args, reason, priority, max_attempts, concurrency_key, tenant) FROM STDIN;

-- name: copy_ingest_jobs_traced
-- The same inside a trace: each line ends with the call's trace context (docs/tracing.md).
COPY ingest_jobs (task_name, queue, args, reason, priority, max_attempts, concurrency_key, tenant, trace_context) FROM STDIN;

-- name: mark_completed
UPDATE {table}
   SET status = 'completed', {result_column} = %(result)s, error = NULL, {clear_unassignable}
       lease_expires_at = NULL, finished_at = now(), updated_at = now()
 WHERE id = %(job_id)s
   AND status NOT IN ('completed', 'failed', 'cancelled')
   AND (%(worker_id)s::text IS NULL OR (claimed_by = %(worker_id)s AND status = 'running'))
RETURNING *;

-- name: mark_failed
UPDATE {table}
   SET status = 'failed', error = %(error)s, {clear_unassignable}
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

-- name: promote_due_jobs
-- Delayed jobs whose time has come become claimable; the requeue trigger wakes workers.
-- The LIMITed pick is fenced (MATERIALIZED: run once), as in claim_batch.
WITH due AS MATERIALIZED (
    SELECT id FROM {table}
     WHERE status = 'scheduled' AND run_after <= now()
       AND (%(queue)s::text IS NULL OR queue = %(queue)s)
     ORDER BY run_after
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE {table} j
   SET status = 'queued', updated_at = now()
  FROM due
 WHERE j.id = due.id
RETURNING j.id;

-- name: queue_has_work
-- Whether a claim on the queue could find anything: a queued job, or a delayed one now due. An
-- idle worker in line for the baton asks it in the round trip of each wait (a transaction begun
-- before the wait: hence statement_timestamp(), not now()), and claims only then.
SELECT EXISTS (SELECT FROM {table} WHERE status = 'queued' AND queue = %(queue)s)
    OR EXISTS (SELECT FROM {table} WHERE status = 'scheduled' AND run_after <= statement_timestamp() AND queue = %(queue)s) AS has_work;

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

-- name: ingest_head_task_names
-- The task names at the head of the queue, as the claim index orders it: bounded, however deep the queue.
SELECT DISTINCT task_name
  FROM (SELECT task_name FROM ingest_jobs
         WHERE queue = %(queue)s AND status = 'queued'
         ORDER BY priority DESC, id
         LIMIT 1000) AS head;
