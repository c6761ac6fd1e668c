-- Named queries of batch mode (queue_workflows.worker.batch).
-- `{table}` and `{result_column}` are bound only to a job table's fixed identifiers (common.sqlfile); values are parameters.
-- `{fair}`, `{bands}` and `{charge}` are fair/fair.sql's fragments, `{order_by}` a fixed one (queue_workflows.queries).

-- name: claim_batch
-- Up to %(limit)s rows in one statement, but no more than this worker's share of what is
-- queued (depth over the queue's live workers, rounded up), so a batch never leaves its peers
-- idle on a short queue. The depth count stops at limit x workers: it stays cheap at any backlog.
-- The rows are leased but not started: no attempt is charged (started_at stays NULL) until
-- a row's start is recorded (start_batch_row, charge_batch_rows), so a crash charges only
-- rows that ran. RETURNING has no order of its own: the rows come back in claim order, the
-- order they are to run in.
WITH RECURSIVE {fair}, peers AS (
    SELECT greatest(count(*), 1) AS n FROM worker_heartbeats WHERE queue = %(queue)s
), depth AS (
    SELECT count(*) AS n
      FROM (SELECT 1 FROM {table} WHERE status = 'queued' AND queue = %(queue)s
             LIMIT %(limit)s::bigint * (SELECT n FROM peers)) AS q
), share AS (
    SELECT greatest(1, least(%(limit)s, ceil((SELECT n FROM depth)::numeric / (SELECT n FROM peers))))::int AS n
), picked AS MATERIALIZED (
    -- Fenced: run once. As `id IN (subquery)` the planner may rescan the LIMITed subquery
    -- per row, each rescan skipping the rows just claimed, and claim past the limit.
    -- Tenants in fair order, each one's bands in aged order (fair/fair.sql), fill the batch; admission as
    -- in claim_job, and the trigger skips, rather than waits for, a key another claim holds.
    SELECT c.id
      FROM fair_tenants AS f CROSS JOIN LATERAL ({bands}) AS fb CROSS JOIN LATERAL (
           SELECT c.id
             FROM {table} AS c
            WHERE c.status = 'queued' AND c.queue = %(queue)s AND c.tenant = f.tenant AND c.priority = fb.priority
                  AND c.id >= fb.floor AND (c.queue, c.tenant, c.priority, c.id) >= (%(queue)s, f.tenant, fb.priority, fb.floor)
              AND ((SELECT NOT EXISTS (SELECT FROM flow_limits AS fl WHERE fl.queue = %(queue)s))
                   OR (NOT ARRAY[qw_flow_tag(c, (SELECT qw_flow_path(%(queue)s)), (SELECT qw_flow_tasks(%(queue)s))),
                                 qw_flow_held(c, (SELECT qw_flow_tasks(%(queue)s)))] && (SELECT qw_flow_blocked(%(queue)s))
                       AND (SELECT set_config('qw.flow_skip_locked', 'on', true)) = 'on'))
            ORDER BY {order_by}
              FOR UPDATE SKIP LOCKED
            LIMIT (SELECT n FROM share)) AS c
     LIMIT (SELECT n FROM share)
), claimed AS (
    UPDATE {table} AS j
       SET status = 'running', {clear_unassignable}
           claimed_by = %(worker_id)s,
           claim_lock_key = %(lock_key)s,
           lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
           started_at = NULL,
           updated_at = now(),
           flow_scope = CASE WHEN (SELECT EXISTS (SELECT FROM flow_limits AS fl WHERE fl.queue = %(queue)s)) THEN qw_flow_scope(j) END
      FROM picked
     WHERE j.id = picked.id
    RETURNING j.*
), {charge}
SELECT * FROM claimed ORDER BY {order_by};

-- name: start_batch_row
-- A suspect batch row (batch_suspect) starts: its start is recorded, and its attempt charged,
-- before its code runs, after charge_batch_rows and the outcomes of the rows finished since
-- the last record, in one round trip. Repeating it charges nothing more; no row back means
-- the row is no longer the caller's, so it must not run. Its transaction commits without
-- waiting for the disk (`async`): a killed worker cannot lose what the server has committed;
-- only a server crash could, and then those rows merely run again.
WITH async AS (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
)
UPDATE {table}
   SET attempts = attempts + CASE WHEN started_at IS NULL THEN 1 ELSE 0 END,
       started_at = coalesce(started_at, now()), updated_at = now()
 WHERE id = %(job_id)s AND claimed_by = %(worker_id)s AND status = 'running'
   AND (SELECT setting FROM async) = 'off'
RETURNING id, attempts;

-- name: async_commit
-- A batch's progress record: a killed worker cannot lose what the server has committed;
-- only a server crash could, and then those rows merely run again.
SET LOCAL synchronous_commit = off;

-- name: charge_batch_rows
-- Rows that have started since the last record: their attempt is charged (once: started_at
-- guards it), so a crash now blames them and release_job refunds them.
UPDATE {table}
   SET attempts = attempts + 1, started_at = now(), updated_at = now()
 WHERE id = ANY(%(ids)s::bigint[]) AND claimed_by = %(worker_id)s AND status = 'running' AND started_at IS NULL
RETURNING id;

-- name: complete_batch
-- A batch's successes in one statement; a row no longer the caller's is left alone (and not returned).
-- A row not yet charged (its start not on record) is charged here, in the same write.
UPDATE {table} AS j
   SET status = 'completed', {result_column} = v.result, error = NULL,
       attempts = j.attempts + CASE WHEN j.started_at IS NULL THEN 1 ELSE 0 END,
       started_at = coalesce(j.started_at, now()),
       lease_expires_at = NULL, finished_at = now(), updated_at = now()
  FROM unnest(%(ids)s::bigint[], %(results)s::jsonb[]) AS v(id, result)
 WHERE j.id = v.id AND j.claimed_by = %(worker_id)s AND j.status = 'running'
RETURNING j.id;
