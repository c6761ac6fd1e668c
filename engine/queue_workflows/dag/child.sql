-- Named queries of child workflows (queue_workflows.dag.child).

-- name: child_count_runs
SELECT count(*) AS n FROM workflow_runs WHERE parent_run_id = %(run_id)s;

-- name: child_insert_run
-- At most one child per parent node (a unique index): a repeated dispatch starts nothing.
INSERT INTO workflow_runs (workflow_name, status, context, definition, priority, parent_run_id, parent_node, depth, trace_context)
VALUES (%(workflow_name)s, 'running', %(context)s, %(definition)s, %(priority)s, %(parent_run_id)s, %(parent_node)s, %(depth)s,
        %(trace_context)s)
ON CONFLICT (parent_run_id, parent_node) WHERE parent_run_id IS NOT NULL DO NOTHING
RETURNING id;

-- name: child_fail_node
-- A child that cannot start fails its node; the outbox trigger writes the event, so the run fails as for any node.
UPDATE workflow_node_jobs
   SET status = 'failed', error = %(error)s, finished_at = now(), updated_at = now()
 WHERE run_id = %(run_id)s AND node_name = %(node_name)s AND status = 'waiting';

-- name: child_lock_descendants
-- Every live run below this one, locked parent-first (by depth) before any of their rows change:
-- a child that ends at the same moment locks its own run, then its parent's node, so taking the
-- runs first here keeps the two from waiting on each other.
WITH RECURSIVE tree AS (
    SELECT id FROM workflow_runs WHERE parent_run_id = %(run_id)s
    UNION ALL
    SELECT r.id FROM workflow_runs r JOIN tree t ON r.parent_run_id = t.id
)
SELECT id FROM workflow_runs
 WHERE id IN (SELECT id FROM tree) AND status NOT IN ('completed', 'failed', 'cancelled')
 ORDER BY depth, id
   FOR NO KEY UPDATE;

-- name: child_hard_cancel_running
-- A hard cancel reaches the running nodes of every run below (the trigger cascade cancelled the rest):
-- the status change revokes each job and its worker exits 77.
WITH RECURSIVE tree AS (
    SELECT id FROM workflow_runs WHERE parent_run_id = %(run_id)s
    UNION ALL
    SELECT r.id FROM workflow_runs r JOIN tree t ON r.parent_run_id = t.id
)
UPDATE workflow_node_jobs
   SET status = 'cancelled', error = %(reason)s, finished_at = now(), lease_expires_at = NULL, updated_at = now()
 WHERE run_id IN (SELECT id FROM tree) AND status = 'running'
RETURNING run_id, node_name;

-- name: child_of_node
SELECT id, status FROM workflow_runs WHERE parent_run_id = %(run_id)s AND parent_node = %(node_name)s;

-- name: child_runs_of
-- run_status: each child node's run.
SELECT id, parent_node, status, error, poisoned_at FROM workflow_runs WHERE parent_run_id = %(run_id)s;
