-- The worker role: what workers, the scheduler and the hw-metrics sidecar connect as. It reads
-- and writes the queue's rows but owns nothing, and in Postgres only an owner (or a superuser)
-- may DROP or ALTER a table, so a compromised worker cannot change the schema. The migration
-- role (the orchestrator's) stays the owner. `qw_worker` is a NOLOGIN group: the stack's
-- Postgres init (deploy/postgres-init) creates it first as a LOGIN role with the worker's
-- password; elsewhere a DBA grants it to a login role (GRANT qw_worker TO myworker).
-- Roles are cluster-wide, so create it only when absent (a migration role without CREATEROLE
-- then needs it created beforehand); the grants below are per database.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'qw_worker') THEN
        CREATE ROLE qw_worker NOLOGIN;
    END IF;
END
$$;

-- CONNECT on the database comes from PUBLIC, as by default; a site that revoked it grants it.
GRANT USAGE ON SCHEMA public TO qw_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO qw_worker;
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO qw_worker;
-- Tables and sequences the migration role creates later (the next migrations) follow suit.
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO qw_worker;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO qw_worker;
