-- Named queries of worker control (queue_workflows.control): the per host and queue switch and device check.

-- name: upsert_worker_control
INSERT INTO worker_controls (host_label, queue, desired_state, stop_policy, requested_by, reason)
VALUES (%(host_label)s, %(queue)s, %(desired_state)s, %(stop_policy)s, %(requested_by)s, %(reason)s)
ON CONFLICT (host_label, queue) DO UPDATE
   SET desired_state = EXCLUDED.desired_state, stop_policy = EXCLUDED.stop_policy,
       requested_by = EXCLUDED.requested_by, reason = EXCLUDED.reason, updated_at = now()
RETURNING *;

-- name: worker_control_for
SELECT desired_state, stop_policy, requested_by, reason, device_check_pending, updated_at
  FROM worker_controls WHERE host_label = %(host_label)s AND queue = %(queue)s;

-- name: set_device_check
-- The row may not exist yet (absent means ON): create it ON, with only the flag changed.
INSERT INTO worker_controls (host_label, queue, device_check_pending)
VALUES (%(host_label)s, %(queue)s, %(pending)s)
ON CONFLICT (host_label, queue) DO UPDATE SET device_check_pending = EXCLUDED.device_check_pending;

-- name: list_worker_controls
SELECT * FROM worker_controls ORDER BY host_label, queue;
