-- Named queries of the run audit trail (queue_workflows.dag.audit).

-- name: record_run_action
INSERT INTO workflow_run_actions (run_id, action, node_name, requested_by, detail)
VALUES (%(run_id)s, %(action)s, %(node_name)s, %(requested_by)s, %(detail)s);

-- name: run_actions
SELECT action, node_name, requested_by, detail, at
  FROM workflow_run_actions
 WHERE run_id = %(run_id)s
 ORDER BY id;
