-- DAG input steps and run cancellation.
--
-- A node declared as an input step is inserted 'awaiting_input' (never claimed: claims take
-- only 'queued'). Anyone may answer it with a plain INSERT into workflow_input_submissions;
-- the trigger below NOTIFYs qw_input and the orchestrator's input listener resumes the node.
CREATE TABLE workflow_input_submissions (
    id           bigserial PRIMARY KEY,
    run_id       bigint NOT NULL REFERENCES workflow_runs (id) ON DELETE CASCADE,
    node_name    text NOT NULL,
    value        jsonb NOT NULL,
    status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'processing', 'applied', 'rejected')),
    attempts     integer NOT NULL DEFAULT 0,
    error        text,
    claimed_by   text,
    claimed_at   timestamptz,
    processed_at timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX workflow_input_submissions_open_idx ON workflow_input_submissions (status, id)
    WHERE status IN ('pending', 'processing');
CREATE INDEX workflow_input_submissions_run_idx ON workflow_input_submissions (run_id, node_name);

CREATE FUNCTION qw_notify_input_submission() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('qw_input', NEW.run_id::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER workflow_input_submissions_notify
    AFTER INSERT ON workflow_input_submissions FOR EACH ROW
    EXECUTE FUNCTION qw_notify_input_submission();

-- No node of a cancelled (or failed) run is ever (re)queued, whoever writes it: a dispatch, a
-- retry after a failed attempt, the reclaim sweep, a graceful hand-back, an operator retry. The
-- row is cancelled instead, so claims (status = 'queued' only) never see it. restart_run puts
-- the run back to 'running' first, so its own resets pass.
CREATE FUNCTION qw_cancelled_run_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    run_status text;
BEGIN
    SELECT status INTO run_status FROM workflow_runs WHERE id = NEW.run_id;
    IF run_status IN ('cancelled', 'failed') THEN
        NEW.status := 'cancelled';
        NEW.error := format('cancelled: run %s is %s', NEW.run_id, run_status);
        NEW.finished_at := now();
        NEW.claimed_by := NULL;
        NEW.claim_lock_key := NULL;
        NEW.lease_expires_at := NULL;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER workflow_node_jobs_cancelled_run_guard_ins
    BEFORE INSERT ON workflow_node_jobs FOR EACH ROW
    WHEN (NEW.run_id IS NOT NULL AND NEW.status IN ('scheduled', 'queued', 'awaiting_input'))
    EXECUTE FUNCTION qw_cancelled_run_guard();

CREATE TRIGGER workflow_node_jobs_cancelled_run_guard_upd
    BEFORE UPDATE OF status ON workflow_node_jobs FOR EACH ROW
    WHEN (NEW.run_id IS NOT NULL AND NEW.status IN ('scheduled', 'queued', 'awaiting_input')
          AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION qw_cancelled_run_guard();
