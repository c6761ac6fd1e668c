-- Every transition off the happy path (retry, reclaim, watchdog trip, hand-back, failure,
-- cancel, operator retry), appended by trigger so no writer can forget it. The happy path
-- (queued -> running -> completed) stays on the row itself: it is the hot path.
CREATE TABLE job_events (
    id          bigserial PRIMARY KEY,
    job_table   text NOT NULL CHECK (job_table IN ('ingest_jobs', 'workflow_node_jobs')),
    job_id      bigint NOT NULL,
    from_status text,
    to_status   text NOT NULL,
    attempts    integer NOT NULL,
    worker_id   text,
    error       text,
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_events_job_idx ON job_events (job_table, job_id, id);
CREATE INDEX job_events_at_idx ON job_events (at);

CREATE FUNCTION qw_record_job_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_events (job_table, job_id, from_status, to_status, attempts, worker_id, error)
    VALUES (TG_TABLE_NAME, NEW.id, OLD.status, NEW.status, NEW.attempts, OLD.claimed_by,
            CASE WHEN NEW.error IS DISTINCT FROM OLD.error THEN left(NEW.error, 2000) END);
    RETURN NULL;
END
$$;

CREATE TRIGGER ingest_jobs_record_event
    AFTER UPDATE OF status ON ingest_jobs FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status
          AND NOT (OLD.status = 'queued' AND NEW.status = 'running')
          AND NOT (OLD.status = 'running' AND NEW.status = 'completed')
          AND NOT (OLD.status = 'scheduled' AND NEW.status = 'queued'))
    EXECUTE FUNCTION qw_record_job_event();

CREATE TRIGGER workflow_node_jobs_record_event
    AFTER UPDATE OF status ON workflow_node_jobs FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status
          AND NOT (OLD.status = 'queued' AND NEW.status = 'running')
          AND NOT (OLD.status = 'running' AND NEW.status = 'completed')
          AND NOT (OLD.status = 'scheduled' AND NEW.status = 'queued'))
    EXECUTE FUNCTION qw_record_job_event();
