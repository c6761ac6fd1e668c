-- Named queries of the history mover (queue_workflows.leader.history): one small batch each, oldest first.
-- %(after_seconds)s: how long a finished row stays hot; %(keep_seconds)s: the retention window
-- (0: forever), so a row retention would delete anyway is not moved; %(batch)s caps a move.

-- name: oldest_movable
-- The day the first partition must cover (NULL: nothing to move), walking the finished indexes
-- past the node rows that stay (a failed run's), so their days get no empty partitions.
SELECT least((SELECT min(finished_at) FROM ingest_jobs WHERE status IN ('completed', 'failed', 'cancelled')),
             (SELECT j.finished_at FROM workflow_node_jobs AS j
               WHERE j.status IN ('completed', 'failed', 'cancelled')
                 AND ((j.run_id IS NULL AND j.status = 'completed')
                      OR EXISTS (SELECT FROM workflow_runs AS r WHERE r.id = j.run_id AND r.status = 'completed'))
               ORDER BY j.finished_at LIMIT 1))
       AS oldest,
       (now() AT TIME ZONE 'UTC')::date AS today,
       CASE WHEN %(keep_seconds)s > 0 THEN ((now() - make_interval(secs => %(keep_seconds)s)) AT TIME ZONE 'UTC')::date END AS kept_from;

-- name: ensure_partitions
SELECT qw_history_ensure_partitions(%(from_day)s, %(to_day)s) AS made;

-- name: move_ingest_jobs
-- Every terminal job; an operator's retry brings a failed or cancelled one back (ops/admin.sql).
WITH moved AS (
    DELETE FROM ingest_jobs WHERE id IN (
        SELECT id FROM ingest_jobs
         WHERE status IN ('completed', 'failed', 'cancelled')
           AND finished_at < now() - make_interval(secs => %(after_seconds)s)
           AND (%(keep_seconds)s = 0 OR finished_at >= now() - make_interval(secs => %(keep_seconds)s))
         ORDER BY finished_at LIMIT %(batch)s
           FOR UPDATE SKIP LOCKED)
    RETURNING *)
INSERT INTO ingest_jobs_history SELECT * FROM moved;

-- name: move_standalone_node_jobs
-- Completed standalone node jobs; failed and cancelled ones stay where `qw retry` finds them.
WITH moved AS (
    DELETE FROM workflow_node_jobs WHERE id IN (
        SELECT id FROM workflow_node_jobs
         WHERE run_id IS NULL AND status = 'completed'
           AND finished_at < now() - make_interval(secs => %(after_seconds)s)
           AND (%(keep_seconds)s = 0 OR finished_at >= now() - make_interval(secs => %(keep_seconds)s))
         ORDER BY finished_at LIMIT %(batch)s
           FOR UPDATE SKIP LOCKED)
    RETURNING *)
INSERT INTO workflow_node_jobs_history SELECT * FROM moved;

-- name: move_run_node_jobs
-- The nodes of a completed run, once it finished `after_seconds` ago: a live run's reads (its
-- inputs, its map items) stay on the hot table, and a failed or cancelled run, which may be
-- restarted, keeps its nodes hot until retention. The run's row is share-locked, so a restart or
-- an operator action holding it makes the batch skip that run rather than move under it.
WITH moved AS (
    DELETE FROM workflow_node_jobs WHERE id IN (
        SELECT j.id FROM workflow_node_jobs AS j JOIN workflow_runs AS r ON r.id = j.run_id
         WHERE r.status = 'completed'
           AND r.finished_at < now() - make_interval(secs => %(after_seconds)s)
           AND j.finished_at < now() - make_interval(secs => %(after_seconds)s)
           AND (%(keep_seconds)s = 0 OR j.finished_at >= now() - make_interval(secs => %(keep_seconds)s))
         ORDER BY j.finished_at LIMIT %(batch)s
           FOR UPDATE OF j SKIP LOCKED
           FOR SHARE OF r SKIP LOCKED)
    RETURNING *)
INSERT INTO workflow_node_jobs_history SELECT * FROM moved;
