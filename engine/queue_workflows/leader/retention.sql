-- Named queries of retention (queue_workflows.leader.retention): one small batch each, oldest first.
-- %(keep_seconds)s is the window kept; %(batch)s caps the rows one statement deletes.

-- name: prune_ingest_jobs
DELETE FROM ingest_jobs WHERE id IN (
    SELECT id FROM ingest_jobs
     WHERE status IN ('completed', 'failed', 'cancelled')
       AND finished_at < now() - make_interval(secs => %(keep_seconds)s)
     ORDER BY finished_at LIMIT %(batch)s);

-- name: prune_node_jobs
-- Standalone node jobs only: a DAG node goes with its run.
DELETE FROM workflow_node_jobs WHERE id IN (
    SELECT id FROM workflow_node_jobs
     WHERE run_id IS NULL AND status IN ('completed', 'failed', 'cancelled')
       AND finished_at < now() - make_interval(secs => %(keep_seconds)s)
     ORDER BY finished_at LIMIT %(batch)s);

-- name: prune_runs
-- A finished run, with its nodes, outbox events and input submissions (ON DELETE CASCADE).
DELETE FROM workflow_runs WHERE id IN (
    SELECT id FROM workflow_runs
     WHERE status IN ('completed', 'failed', 'cancelled')
       AND finished_at < now() - make_interval(secs => %(keep_seconds)s)
     ORDER BY finished_at LIMIT %(batch)s);

-- name: prune_job_events
DELETE FROM job_events WHERE id IN (
    SELECT id FROM job_events
     WHERE at < now() - make_interval(secs => %(keep_seconds)s)
     ORDER BY at LIMIT %(batch)s);

-- name: prune_dispatch_events
DELETE FROM workflow_dispatch_events WHERE id IN (
    SELECT id FROM workflow_dispatch_events
     WHERE processed_at < now() - make_interval(secs => %(keep_seconds)s)
     ORDER BY processed_at LIMIT %(batch)s);

-- name: prune_workflow_events
-- Sent events (migration 0038) once decided, and kept ones no node took within the window; a
-- run's own go with it (ON DELETE CASCADE).
DELETE FROM workflow_events WHERE id IN (
    SELECT id FROM workflow_events
     WHERE coalesce(processed_at, created_at) < now() - make_interval(secs => %(keep_seconds)s)
     ORDER BY id LIMIT %(batch)s);

-- name: prune_worker_exits
DELETE FROM qw_worker_exits WHERE id IN (
    SELECT id FROM qw_worker_exits
     WHERE at < now() - make_interval(secs => %(keep_seconds)s)
     ORDER BY at LIMIT %(batch)s);

-- name: drop_history
-- Moved jobs (leader/history.py) go a whole day's partition at a time, once all of that day is
-- past the window; the rows that never moved are the deletes above.
SELECT qw_history_drop_before(now() - make_interval(secs => %(keep_seconds)s), %(batch)s) AS dropped;
