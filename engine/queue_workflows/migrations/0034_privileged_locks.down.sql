-- Back to 0007's view: every session holding a worker key counts, whatever its role.
CREATE OR REPLACE VIEW qw_worker_sessions AS
SELECT DISTINCT l.objid::bigint AS lock_key
  FROM pg_locks l
 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
   AND l.classid::bigint = 20823
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database());

DROP TABLE schedule_entry_turns;
DROP TABLE gpu_claim_turns;
