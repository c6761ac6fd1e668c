-- A batch row whose worker died before it was recorded as started: it may be what killed the
-- worker, so a batch worker runs it carefully next time, recording its start (and charging
-- its attempt) before its code runs (queue_workflows.batch). Set only by the reclaim.
ALTER TABLE ingest_jobs ADD COLUMN batch_suspect boolean NOT NULL DEFAULT false;
ALTER TABLE workflow_node_jobs ADD COLUMN batch_suspect boolean NOT NULL DEFAULT false;
