-- Named queries of `qw dev` (qw_services.dev). `{table}` is bound only to a job table's fixed identifier.

-- name: job_status_counts
-- The demo's jobs by status, for its closing totals; `{table}` is a job table's `_all` view (a job may have moved to history), or workflow_runs.
SELECT status, count(*) AS n FROM {table} WHERE id = ANY(%(ids)s) GROUP BY status;
