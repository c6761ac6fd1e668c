-- An enqueue NOTIFYs only when a worker waits for it (docs/throughput.md, "Producers that do not
-- serialise on NOTIFY"): every transaction that NOTIFYs takes one cluster-wide lock at commit, so
-- concurrent producers that all notified committed one at a time.
--
-- A cpu or ingest queue's idle worker holds, or waits in line for, its idle baton (0032: a session
-- advisory lock, exclusive, namespace 0x5159 = 20825). The trigger asks for that lock *shared* and
-- without waiting: refused means a worker holds or wants the baton, so the job is announced; granted
-- means nobody waits, and the producer keeps the shared lock until its transaction ends. A worker
-- takes the baton only after every such producer has committed, and claims once before it listens
-- (worker/claim.py), so it sees their jobs: no enqueue slips between its last claim and its wait.
--
-- Queues whose idle workers all act on NOTIFY (gpu, whose workers pick jobs by the models they hold,
-- and any queue with a worker running QW_IDLE_BATON=0) are listed in qw_wake_every_enqueue and are
-- announced on every enqueue, as before. A worker of such a queue adds its queue when it starts.
CREATE TABLE qw_wake_every_enqueue (
    queue text PRIMARY KEY,
    added_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO qw_wake_every_enqueue (queue) VALUES ('gpu');
-- Every enqueuing role reads it through the trigger, a host application's own role included:
-- a list of queue names, readable by all. 0033's default privileges let the orchestrator write it;
-- workers only add their queue.
GRANT SELECT ON qw_wake_every_enqueue TO PUBLIC;
REVOKE UPDATE, DELETE ON qw_wake_every_enqueue FROM qw_worker;

CREATE OR REPLACE FUNCTION qw_notify_job_ready() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- The lock first: the table is then read with a snapshot taken after it was granted.
    IF pg_try_advisory_xact_lock_shared(20825, hashtext(NEW.queue))
       AND NOT EXISTS (SELECT FROM qw_wake_every_enqueue WHERE queue = NEW.queue) THEN
        RETURN NULL;
    END IF;
    PERFORM pg_notify(TG_ARGV[0], NEW.queue);
    PERFORM pg_notify('qw_ready_' || NEW.queue, NEW.queue);
    RETURN NULL;
END
$$;
