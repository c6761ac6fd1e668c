-- Worker exits by code, for the orchestrator's cluster metrics (qw_cluster_worker_exits_total):
-- a worker that stops itself mid-job (watchdog, lost job, device error, hard stop: 75-79) or
-- refuses a transaction pooler at start (80) appends one row on its way out. A process killed
-- from outside writes nothing: the reclaim sweep's count covers those. Pruned with the event log.
CREATE TABLE qw_worker_exits (
    id         bigserial PRIMARY KEY,
    worker_id  text NOT NULL,
    host_label text NOT NULL,
    queue      text NOT NULL,
    code       integer NOT NULL CHECK (code BETWEEN 0 AND 255),
    job_id     bigint,
    reason     text CHECK (length(reason) <= 2000),
    at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX qw_worker_exits_at_idx ON qw_worker_exits (at);

-- Workers only append (0018's default privileges would also let them rewrite and delete).
REVOKE UPDATE, DELETE, TRUNCATE ON qw_worker_exits FROM qw_worker;

-- The cluster metrics count waiting nodes per queue every sample; the other partial indexes on
-- 'waiting' carry extra conditions the count cannot use.
CREATE INDEX workflow_node_jobs_waiting_idx ON workflow_node_jobs (queue) WHERE status = 'waiting';
