-- Named queries of the leader's recovery of jobs and workers that are gone (queue_workflows.jobstore, run by leader.reclaim).
-- `{table}` and `{result_column}` are bound only to a job table's fixed identifiers (common.sqlfile); values are parameters.

-- name: sweep_has_work
-- Whether the reclaim sweep has anything to act on: a running job (its worker may die) or a
-- delayed job now due. An idle leader asks only this, every interval, instead of the whole sweep.
SELECT EXISTS (SELECT 1 FROM workflow_node_jobs WHERE status = 'running')
    OR EXISTS (SELECT 1 FROM ingest_jobs WHERE status = 'running')
    OR EXISTS (SELECT 1 FROM workflow_node_jobs WHERE status = 'scheduled' AND run_after <= now())
    OR EXISTS (SELECT 1 FROM ingest_jobs WHERE status = 'scheduled' AND run_after <= now()) AS busy;

-- name: lockless_jobs
-- Running jobs whose worker no session speaks for any more: suspects, reclaimed only if
-- still lockless a moment later (a live worker restores a dropped connection within that).
-- A job claimed before this server's lock table began lost its lock with the old one, not in a
-- crash: its worker gets the grace period to reconnect and retake the lock. The lock table
-- begins at a restart, and at a standby's promotion (a failover: advisory locks are not
-- replicated), after the last transaction the standby replayed, which is later than any
-- claim made on the old primary. (A batch row not started yet has no started_at: its claim
-- or last renewal stands in.)
SELECT j.id
  FROM {table} j
  CROSS JOIN (SELECT greatest(pg_postmaster_start_time(), pg_last_xact_replay_timestamp()) AS since) locks
 WHERE j.status = 'running'
   AND j.claim_lock_key IS NOT NULL
   AND (coalesce(j.started_at, j.updated_at) > locks.since
        OR locks.since < now() - make_interval(secs => %(session_grace_seconds)s))
   AND j.claim_lock_key::bigint NOT IN (SELECT lock_key FROM qw_worker_sessions);

-- name: reclaim_orphans
-- The one recovery path for a running job whose worker is gone: a suspect that still has
-- no session holding its worker's lock (the process died), or a lapsed lease (the host vanished).
-- A batch row never recorded as started goes back uncharged, flagged batch_suspect: it may
-- have run (and killed its worker) between two progress records, so next time its start is
-- recorded before it runs.
WITH orphans AS MATERIALIZED (  -- the rows locked are the rows updated
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

-- name: prune_dead_heartbeats
-- Heartbeat rows of workers that are gone: stale, and no session holds their lock.
DELETE FROM worker_heartbeats
 WHERE last_seen < now() - make_interval(secs => %(stale_after_seconds)s)
   AND lock_key NOT IN (SELECT lock_key FROM qw_worker_sessions)
RETURNING worker_id;

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
