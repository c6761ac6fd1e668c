-- One NOLOGIN group role per process kind, each granted only the writes that process's SQL makes
-- (deploy/README.md has the table): a worker that is compromised, or a host that is lent out,
-- cannot rewrite the migration ledger, take or depose leadership, or touch another role's rows.
-- The stack's Postgres init (deploy/postgres-init) creates them first as LOGIN roles with their
-- passwords; elsewhere they are created here and a DBA grants them to login roles. Where one role
-- does everything (tests, `qw dev`, an app's own superuser) these grants change nothing it can do.
DO $$
DECLARE
    name text;
    missing text[] := ARRAY(SELECT r FROM unnest(ARRAY['qw_worker', 'qw_orchestrator', 'qw_scheduler', 'qw_dashboard',
                                                       'qw_metrics']) AS r
                             WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r));
BEGIN
    IF missing <> '{}' AND NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = current_user AND (rolsuper OR rolcreaterole)) THEN
        RAISE EXCEPTION 'migration 0033 needs the roles % and % may not create roles', missing, current_user
            USING HINT = 'have an administrator run CREATE ROLE <name> NOLOGIN for each, then migrate again';
    END IF;
    FOREACH name IN ARRAY missing LOOP
        EXECUTE format('CREATE ROLE %I NOLOGIN', name);
    END LOOP;
END
$$;

-- Only the owner creates objects (Postgres before 15 let PUBLIC create in schema public).
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO qw_worker, qw_orchestrator, qw_scheduler, qw_dashboard, qw_metrics;

-- Everyone reads (status, the dashboard, the sidecar's gauges): writes are what is guarded.
GRANT SELECT ON ALL TABLES IN SCHEMA public TO qw_worker, qw_orchestrator, qw_scheduler, qw_dashboard, qw_metrics;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO qw_worker, qw_orchestrator, qw_scheduler, qw_dashboard;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO qw_orchestrator, qw_scheduler, qw_dashboard, qw_metrics;

-- Workers keep 0018's read/write on the queue's own tables (and, by its default privileges, on
-- tables later migrations add), but not on the control plane's: the ledger, leadership, the
-- orchestrator registry, the scheduler's slots and the sidecars' snapshots. Finished rows are
-- deleted only by the leader's retention, and nothing but the owner truncates.
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON qw_leadership, qw_orchestrators, schedule_slots, host_metrics FROM qw_worker;
REVOKE DELETE, TRUNCATE ON ingest_jobs, workflow_node_jobs, workflow_runs, job_events, workflow_dispatch_events,
    workflow_run_actions, workflow_input_submissions FROM qw_worker;
REVOKE UPDATE ON ALL SEQUENCES IN SCHEMA public FROM qw_worker;
DO $$
BEGIN
    -- The ledger is created by db.bootstrap before 0001, so 0018's blanket grant reached it.
    IF to_regclass('queue_schema_version') IS NOT NULL THEN
        REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON queue_schema_version FROM qw_worker;
    END IF;
END
$$;

-- The orchestrators: leadership, reclaim, DAG dispatch, the dead-worker detector, retention.
GRANT INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO qw_orchestrator;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT INSERT, UPDATE, DELETE ON TABLES TO qw_orchestrator;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE ON SEQUENCES TO qw_orchestrator, qw_scheduler, qw_dashboard;
REVOKE INSERT, UPDATE, DELETE ON schedule_slots, host_metrics FROM qw_orchestrator;
DO $$
BEGIN
    IF to_regclass('queue_schema_version') IS NOT NULL THEN
        REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON queue_schema_version FROM qw_orchestrator;
    END IF;
END
$$;

-- The scheduler: its slot ledger, and the ingest jobs it enqueues (whose triggers log events).
GRANT INSERT, UPDATE, DELETE ON schedule_slots TO qw_scheduler;
GRANT INSERT ON ingest_jobs, job_events TO qw_scheduler;

-- The dashboard's actions: ON/OFF, cancel, restart, inputs, each recorded; status changes fire
-- the job-event and DAG-outbox triggers, which insert as the caller.
GRANT INSERT, UPDATE, DELETE ON worker_controls TO qw_dashboard;
GRANT INSERT, UPDATE ON workflow_runs, workflow_node_jobs, ingest_jobs, workflow_input_submissions TO qw_dashboard;
GRANT INSERT ON workflow_run_actions, job_events, workflow_dispatch_events TO qw_dashboard;

-- The hw-metrics sidecar: its host's latest snapshot row (the NOTIFY needs no grant).
GRANT INSERT, UPDATE ON host_metrics TO qw_metrics;
