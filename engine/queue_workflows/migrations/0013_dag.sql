-- DAG runs. A run keeps a snapshot of its definition, so dispatch never depends on code that
-- changed mid-run; a node is inserted at most once per run (unique (run_id, node_name)), and
-- a node that will never run is a 'skipped' marker row.
ALTER TABLE workflow_runs
    ADD COLUMN definition  jsonb,
    ADD COLUMN priority    integer NOT NULL DEFAULT 0,
    ADD COLUMN poisoned_at timestamptz;

ALTER TABLE workflow_node_jobs DROP CONSTRAINT workflow_node_jobs_status_check;
ALTER TABLE workflow_node_jobs ADD CONSTRAINT workflow_node_jobs_status_check
    CHECK (status IN ('scheduled', 'queued', 'running', 'awaiting_input', 'completed', 'failed', 'cancelled', 'skipped'));
-- input_refs: the inputs left as references at enqueue, resolved by the worker just before the
-- node runs (NULL for a job not enqueued by the dispatcher: it keeps the run(inputs) call).
ALTER TABLE workflow_node_jobs
    ADD COLUMN input_refs     jsonb,
    ADD COLUMN budget_seconds double precision CHECK (budget_seconds > 0);
ALTER TABLE workflow_node_jobs ADD CONSTRAINT workflow_node_jobs_run_node_key UNIQUE (run_id, node_name);

-- The transactional outbox (contract 5). A trigger writes the event in the same transaction as
-- the node's terminal status, whoever writes it: the worker's mark, a watchdog trip, the
-- reclaim sweep failing a job at its cap, an operator's cancel, a plain SQL UPDATE.
CREATE TABLE workflow_dispatch_events (
    id              bigserial PRIMARY KEY,
    run_id          bigint NOT NULL REFERENCES workflow_runs (id) ON DELETE CASCADE,
    node_job_id     bigint NOT NULL,
    node_name       text NOT NULL,
    kind            text NOT NULL CHECK (kind IN ('completed', 'failed', 'cancelled')),
    attempts        integer NOT NULL DEFAULT 0,
    last_error      text,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    poisoned_at     timestamptz,
    processed_at    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX workflow_dispatch_events_pending_idx ON workflow_dispatch_events (next_attempt_at, id)
    WHERE processed_at IS NULL AND poisoned_at IS NULL;
CREATE INDEX workflow_dispatch_events_run_idx ON workflow_dispatch_events (run_id);

CREATE FUNCTION qw_record_dispatch_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO workflow_dispatch_events (run_id, node_job_id, node_name, kind)
    VALUES (NEW.run_id, NEW.id, NEW.node_name, NEW.status);
    PERFORM pg_notify('qw_dispatch', NEW.run_id::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER workflow_node_jobs_dispatch_event
    AFTER UPDATE OF status ON workflow_node_jobs FOR EACH ROW
    WHEN (NEW.run_id IS NOT NULL
          AND NEW.status IN ('completed', 'failed', 'cancelled')
          AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION qw_record_dispatch_event();
