-- Wake workers from inside the writer's transaction: on insert and on any return to
-- 'queued'. The payload is the queue name; Postgres folds duplicates per transaction.
CREATE FUNCTION qw_notify_job_ready() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_ARGV[0], NEW.queue);
    RETURN NULL;
END
$$;

CREATE TRIGGER workflow_node_jobs_ready_on_insert
    AFTER INSERT ON workflow_node_jobs FOR EACH ROW
    WHEN (NEW.status = 'queued')
    EXECUTE FUNCTION qw_notify_job_ready('node_job_ready');

CREATE TRIGGER workflow_node_jobs_ready_on_requeue
    AFTER UPDATE OF status ON workflow_node_jobs FOR EACH ROW
    WHEN (NEW.status = 'queued' AND OLD.status IS DISTINCT FROM 'queued')
    EXECUTE FUNCTION qw_notify_job_ready('node_job_ready');

CREATE TRIGGER ingest_jobs_ready_on_insert
    AFTER INSERT ON ingest_jobs FOR EACH ROW
    WHEN (NEW.status = 'queued')
    EXECUTE FUNCTION qw_notify_job_ready('ingest_job_ready');

CREATE TRIGGER ingest_jobs_ready_on_requeue
    AFTER UPDATE OF status ON ingest_jobs FOR EACH ROW
    WHEN (NEW.status = 'queued' AND OLD.status IS DISTINCT FROM 'queued')
    EXECUTE FUNCTION qw_notify_job_ready('ingest_job_ready');
