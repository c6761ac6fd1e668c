-- Named queries of orchestrator leadership (queue_workflows.leadership).

-- name: leader_try_lock
-- Session-level and exclusive: held until this connection ends or the leader unlocks.
SELECT pg_try_advisory_lock(%(namespace)s::integer, 0) AS acquired;

-- name: leader_unlock
SELECT pg_advisory_unlock(%(namespace)s::integer, 0) AS released;

-- name: leader_new_term
-- Waits for every transaction of the previous leader that passed the fence to end.
UPDATE qw_leadership
   SET epoch = epoch + 1, leader_id = %(orchestrator_id)s, since = now()
 WHERE id = 1
RETURNING epoch;

-- name: leader_fence
-- First statement of every leader transaction: no row means another leader has started.
-- The transaction-local timeout bounds how long a stalled leader can hold the next one back.
SELECT epoch, set_config('idle_in_transaction_session_timeout', %(idle_ms)s, true) AS idle_timeout
  FROM qw_leadership
 WHERE id = 1 AND epoch = %(epoch)s
   FOR SHARE;

-- name: leader_epoch
SELECT epoch, leader_id FROM qw_leadership WHERE id = 1;

-- name: orchestrator_beat
INSERT INTO qw_orchestrators (orchestrator_id, hostname, host_label, pid, role, epoch)
VALUES (%(orchestrator_id)s, %(hostname)s, %(host_label)s, %(pid)s, %(role)s, %(epoch)s)
ON CONFLICT (orchestrator_id) DO UPDATE
   SET role = EXCLUDED.role, epoch = EXCLUDED.epoch, beat_at = now();

-- name: orchestrator_gone
DELETE FROM qw_orchestrators WHERE orchestrator_id = %(orchestrator_id)s;

-- name: orchestrators_prune
-- Rows of orchestrators that stopped beating (killed, or their host vanished).
DELETE FROM qw_orchestrators WHERE beat_at < now() - make_interval(secs => %(stale_seconds)s)
RETURNING orchestrator_id;

-- name: orchestrators_list
-- A row still saying 'leader' from an older term is a leader that died or was cut off: 'deposed'.
SELECT o.orchestrator_id, o.hostname, o.host_label, o.pid,
       CASE WHEN o.role = 'standby' THEN 'standby' WHEN o.epoch = l.epoch THEN 'leader' ELSE 'deposed' END AS role,
       o.epoch, o.started_at, extract(epoch FROM now() - o.beat_at)::float AS silent_seconds
  FROM qw_orchestrators o CROSS JOIN qw_leadership l
 ORDER BY o.role <> 'leader' OR o.epoch <> l.epoch, o.started_at;
