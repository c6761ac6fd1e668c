-- Named queries of `qw health` (qw_services.health), the containers' HEALTHCHECK.

-- name: worker_rows
-- This container's worker rows: its host label, its processes' pids, and (optionally) its queue.
-- Replicas on one host may reuse a pid, so the caller also matches started_at to the process.
SELECT worker_id, queue, pid, state, started_at,
       extract(epoch FROM started_at)::float AS started_epoch,
       extract(epoch FROM now() - last_seen)::float AS silent_seconds
  FROM worker_heartbeats
 WHERE host_label = %(host_label)s AND pid = ANY(%(pids)s)
   AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
 ORDER BY started_at;

-- name: worker_rows_by_id
-- The rows of the workers this container's processes named (liveness.id_notes).
SELECT worker_id, queue, pid, state, started_at,
       extract(epoch FROM now() - last_seen)::float AS silent_seconds
  FROM worker_heartbeats
 WHERE worker_id = ANY(%(worker_ids)s)
   AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
 ORDER BY last_seen DESC;

-- name: orchestrator_row
-- This container's orchestrator (leader or standby): the hostname is the container's own.
SELECT orchestrator_id, role, extract(epoch FROM now() - beat_at)::float AS silent_seconds
  FROM qw_orchestrators
 WHERE hostname = %(hostname)s
 ORDER BY beat_at DESC
 LIMIT 1;
