-- A node's own timeout and retry policy (`timeout`, `retry_backoff`, `retry_on`, `no_retry_on`),
-- carried on its row so the worker that claims it applies it with no extra query. NULL: the
-- defaults (the watchdog budget, QW_RETRY_BASE_SECONDS / QW_RETRY_MAX_SECONDS, every failure retried).
ALTER TABLE workflow_node_jobs
    ADD COLUMN retry_policy jsonb CHECK (retry_policy IS NULL OR jsonb_typeof(retry_policy) = 'object');
