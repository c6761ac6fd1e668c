-- Named queries of orchestrator leadership (queue_workflows.leader.leadership).
-- %(at)s is the server time to judge leases by; NULL (always, outside tests) means clock_timestamp().

-- name: leader_vacant
-- A standby's bid, first statement of its transaction: the row, only when no live lease holds
-- it (none yet, released, lapsed, or its holder's connection is gone). FOR UPDATE waits for
-- every guarded transaction of the old term (they hold FOR KEY SHARE) and blocks its renewal.
-- The backend check is only a hint of a dead leader: it can hasten a takeover, never block one.
SELECT l.epoch
  FROM qw_leadership l
 WHERE l.id = 1
   AND (l.lease_until IS NULL
        OR l.lease_until <= coalesce(%(at)s::timestamptz, clock_timestamp())
        OR NOT EXISTS (SELECT 1 FROM pg_stat_activity a
                        WHERE a.pid = l.backend_pid AND a.datname = current_database()
                          AND (a.backend_start IS NULL OR a.backend_start = l.backend_start)))
   FOR UPDATE OF l;

-- name: leader_seems_vacant
-- A standby's look before it bids: leader_vacant's test without its row lock, one statement
-- outside a transaction, so polling a lease that is held costs one round trip, not three.
SELECT l.epoch
  FROM qw_leadership l
 WHERE l.id = 1
   AND (l.lease_until IS NULL
        OR l.lease_until <= coalesce(%(at)s::timestamptz, clock_timestamp())
        OR NOT EXISTS (SELECT 1 FROM pg_stat_activity a
                        WHERE a.pid = l.backend_pid AND a.datname = current_database()
                          AND (a.backend_start IS NULL OR a.backend_start = l.backend_start)));

-- name: leader_new_term
-- Second statement of the bid, with the row locked: a new epoch fences the old term out.
UPDATE qw_leadership
   SET epoch = epoch + 1, leader_id = %(orchestrator_id)s, since = now(),
       lease_until = coalesce(%(at)s::timestamptz, clock_timestamp()) + make_interval(secs => %(lease_seconds)s),
       backend_pid = pg_backend_pid(),
       backend_start = (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid())
 WHERE id = 1
RETURNING epoch, lease_until;

-- name: leader_renew
-- Only an unexpired lease of this term is extended: a lapsed one is lost even if no one took it.
-- A plain UPDATE takes FOR NO KEY UPDATE, which the services' FOR KEY SHARE never delays.
UPDATE qw_leadership
   SET lease_until = coalesce(%(at)s::timestamptz, clock_timestamp()) + make_interval(secs => %(lease_seconds)s)
 WHERE id = 1 AND epoch = %(epoch)s AND lease_until > coalesce(%(at)s::timestamptz, clock_timestamp())
RETURNING epoch, lease_until;

-- name: leader_release
-- A clean stop: the lease ends now, so a standby's next bid takes the term.
UPDATE qw_leadership SET lease_until = NULL WHERE id = 1 AND epoch = %(epoch)s
RETURNING epoch;

-- name: leader_fence
-- First statement of every leader transaction: no row means another term began or this one's
-- lease lapsed. The transaction-local timeout bounds how long a stalled leader can hold the
-- next term back.
SELECT epoch, set_config('idle_in_transaction_session_timeout', %(idle_ms)s, true) AS idle_timeout
  FROM qw_leadership
 WHERE id = 1 AND epoch = %(epoch)s AND lease_until > coalesce(%(at)s::timestamptz, clock_timestamp())
   FOR KEY SHARE;

-- name: leader_epoch
SELECT epoch, leader_id, extract(epoch FROM lease_until - clock_timestamp())::float AS lease_left
  FROM qw_leadership WHERE id = 1;

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
-- A row still saying 'leader' from an older term is a leader that died or was cut off: 'deposed';
-- one of the current term whose lease ran out, with no successor yet: 'lapsed'.
SELECT o.orchestrator_id, o.hostname, o.host_label, o.pid,
       CASE WHEN o.role = 'standby' THEN 'standby'
            WHEN o.epoch <> l.epoch THEN 'deposed'
            WHEN l.lease_until > clock_timestamp() THEN 'leader'
            ELSE 'lapsed' END AS role,
       o.epoch, o.started_at, extract(epoch FROM now() - o.beat_at)::float AS silent_seconds
  FROM qw_orchestrators o CROSS JOIN qw_leadership l
 ORDER BY o.role <> 'leader' OR o.epoch <> l.epoch, o.started_at;
