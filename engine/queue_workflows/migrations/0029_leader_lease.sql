-- Orchestrator leadership becomes a lease the leader renews (queue_workflows.leadership): a
-- frozen or cut-off leader keeps its connection, and so would keep a session lock, for ever,
-- while a lease it cannot renew lapses on the server's clock and a standby takes the next term.
-- The leader's lease connection (backend pid and start) is recorded only as a hint: a standby
-- may take over before the lease lapses when that backend is gone (the leader died).
ALTER TABLE qw_leadership
    ADD COLUMN lease_until   timestamptz,
    ADD COLUMN backend_pid   integer,
    ADD COLUMN backend_start timestamptz;

-- Only the orchestrator's role (the owner) may take or renew leadership; the worker role
-- (migration 0018) still reads it for `qw status` and the dashboard.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'qw_worker') THEN
        REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON qw_leadership FROM qw_worker;
    END IF;
END
$$;
