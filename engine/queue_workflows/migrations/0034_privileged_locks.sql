-- Nothing that serialises the engine rests on an advisory lock, which any role that can connect
-- may take and hold forever: routed gpu claims and a schedule entry's boot kick take turns on a
-- row lock instead, which only a role that may UPDATE the row can take (FOR UPDATE, or the
-- ON CONFLICT arm below, needs UPDATE privilege; a SELECT-only role cannot even queue for it).

-- One row per gpu queue, locked for the length of a routed claim's transaction (gpu/claim.sql).
CREATE TABLE gpu_claim_turns (
    queue text PRIMARY KEY
);

-- One row per schedule entry, locked while a replica decides its boot kick (schedule/schedule.sql).
CREATE TABLE schedule_entry_turns (
    entry_name text PRIMARY KEY
);

-- 0018's and 0033's default privileges gave new tables to every role: each turn table belongs to
-- the one process kind that takes its turns.
REVOKE ALL ON gpu_claim_turns, schedule_entry_turns FROM qw_worker, qw_orchestrator, qw_scheduler, qw_dashboard, qw_metrics;
GRANT SELECT ON gpu_claim_turns, schedule_entry_turns TO qw_worker, qw_orchestrator, qw_scheduler, qw_dashboard, qw_metrics;
GRANT INSERT, UPDATE ON gpu_claim_turns TO qw_worker;
GRANT INSERT, UPDATE ON schedule_entry_turns TO qw_scheduler;

-- A worker's session lock (docs/liveness.md) stays advisory, but only a worker's session keeps a
-- worker alive: a key also held by a session of any other role (the dashboard's, the sidecar's)
-- does not count for it, so such a hold cannot keep a dead worker's job from reclaim. The owner
-- counts, for setups where one role runs everything. A session missing from this transaction's
-- snapshot of pg_stat_activity (one that connected since) counts, as before.
CREATE OR REPLACE VIEW qw_worker_sessions AS
SELECT DISTINCT l.objid::bigint AS lock_key
  FROM pg_locks l
 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
   AND l.classid::bigint = 20823
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND NOT EXISTS (
       SELECT 1 FROM pg_stat_activity a
        WHERE a.pid = l.pid
          AND NOT pg_has_role(a.usesysid, 'qw_worker', 'MEMBER')
          AND a.usesysid IS DISTINCT FROM (SELECT c.relowner FROM pg_class c WHERE c.oid = to_regclass('qw_worker_sessions')));
