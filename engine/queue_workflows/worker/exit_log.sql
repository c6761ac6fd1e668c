-- Named queries of the worker's exit record (queue_workflows.worker.exit_log; table: migration 0055).

-- name: record_exit
INSERT INTO qw_worker_exits (worker_id, host_label, queue, code, job_id, reason)
VALUES (%(worker_id)s, %(host_label)s, %(queue)s, %(code)s, %(job_id)s, left(%(reason)s, 2000));
