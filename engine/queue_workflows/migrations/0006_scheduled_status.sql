-- Jobs waiting out a retry delay (or a future run_after) move to their own status, so the
-- claim index holds only ready work and a claim never walks past a backlog of delayed jobs.
-- A sweep promotes them to 'queued' when due; the requeue trigger then wakes the workers.
ALTER TABLE workflow_node_jobs DROP CONSTRAINT workflow_node_jobs_status_check;
ALTER TABLE workflow_node_jobs ADD CONSTRAINT workflow_node_jobs_status_check
    CHECK (status IN ('scheduled', 'queued', 'running', 'awaiting_input', 'completed', 'failed', 'cancelled'));
ALTER TABLE ingest_jobs DROP CONSTRAINT ingest_jobs_status_check;
ALTER TABLE ingest_jobs ADD CONSTRAINT ingest_jobs_status_check
    CHECK (status IN ('scheduled', 'queued', 'running', 'completed', 'failed', 'cancelled'));

UPDATE workflow_node_jobs SET status = 'scheduled' WHERE status = 'queued' AND run_after > now();
UPDATE ingest_jobs SET status = 'scheduled' WHERE status = 'queued' AND run_after > now();

CREATE INDEX workflow_node_jobs_scheduled_idx ON workflow_node_jobs (run_after) WHERE status = 'scheduled';
CREATE INDEX ingest_jobs_scheduled_idx ON ingest_jobs (run_after) WHERE status = 'scheduled';

-- A plain INSERT with a future run_after (from any SQL writer) lands as 'scheduled'.
CREATE FUNCTION qw_schedule_future_job() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.status := 'scheduled';
    RETURN NEW;
END
$$;

CREATE TRIGGER workflow_node_jobs_schedule_future
    BEFORE INSERT ON workflow_node_jobs FOR EACH ROW
    WHEN (NEW.status = 'queued' AND NEW.run_after > now())
    EXECUTE FUNCTION qw_schedule_future_job();

CREATE TRIGGER ingest_jobs_schedule_future
    BEFORE INSERT ON ingest_jobs FOR EACH ROW
    WHEN (NEW.status = 'queued' AND NEW.run_after > now())
    EXECUTE FUNCTION qw_schedule_future_job();
