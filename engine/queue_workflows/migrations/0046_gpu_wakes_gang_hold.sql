-- A gpu job leaving 'running' frees the VRAM it reserved (docs/gpu.md, "Several jobs per GPU"),
-- so the queue's idle gpu workers, some of which found no room, are woken to claim again rather
-- than wait for their poll. A trigger on the row, not the code that ends the job, so every way
-- out of 'running' counts: completion, failure, a retry, a hand-back, a reclaim after kill -9, a
-- hard cancel. Only while a job of that queue is queued: otherwise nobody waits for the room,
-- and a NOTIFY would only cost a commit its turn in Postgres's notification queue.
CREATE FUNCTION qw_gpu_room_freed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT FROM workflow_node_jobs WHERE queue = OLD.queue AND status = 'queued') THEN
        PERFORM pg_notify('qw_ready_' || OLD.queue, OLD.queue);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER workflow_node_jobs_gpu_room_freed AFTER UPDATE OF status ON workflow_node_jobs FOR EACH ROW
    WHEN (OLD.status = 'running' AND NEW.status <> 'running' AND OLD.gpu_devices IS NOT NULL)
    EXECUTE FUNCTION qw_gpu_room_freed();

-- The oldest waiting multi-GPU job of a queue in one probe (gpu/claim.sql, `gang`): a routed
-- claim must not read the backlog to find it.
CREATE INDEX workflow_node_jobs_gang_idx ON workflow_node_jobs (queue, run_after) WHERE status = 'queued' AND gpus > 1;
