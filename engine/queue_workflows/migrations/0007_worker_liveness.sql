-- The sessions that hold a worker lock: a worker holds its key (shared) on two connections,
-- and it counts as alive while either does. The namespace is jobstore.WORKER_LOCK_NAMESPACE.
CREATE VIEW qw_worker_sessions AS
SELECT DISTINCT l.objid::bigint AS lock_key
  FROM pg_locks l
 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
   AND l.classid::bigint = 20823
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database());

-- Tell a worker at once when the job it runs is taken from it (reclaimed, released, or
-- failed by someone else), so it stops (exit 77) instead of finishing a duplicate.
-- Payload: '<job id>:<worker id>'. The owner's own completion does not fire it.
CREATE FUNCTION qw_notify_job_revoked() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('qw_job_revoked', OLD.id || ':' || OLD.claimed_by);
    RETURN NULL;
END
$$;

CREATE TRIGGER workflow_node_jobs_revoked
    AFTER UPDATE OF status, claimed_by ON workflow_node_jobs FOR EACH ROW
    WHEN (OLD.status = 'running' AND OLD.claimed_by IS NOT NULL AND NEW.status <> 'completed'
          AND (NEW.status <> 'running' OR NEW.claimed_by IS DISTINCT FROM OLD.claimed_by))
    EXECUTE FUNCTION qw_notify_job_revoked();

CREATE TRIGGER ingest_jobs_revoked
    AFTER UPDATE OF status, claimed_by ON ingest_jobs FOR EACH ROW
    WHEN (OLD.status = 'running' AND OLD.claimed_by IS NOT NULL AND NEW.status <> 'completed'
          AND (NEW.status <> 'running' OR NEW.claimed_by IS DISTINCT FROM OLD.claimed_by))
    EXECUTE FUNCTION qw_notify_job_revoked();
