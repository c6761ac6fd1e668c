-- Back to 0018's grants: qw_worker reads and writes every table; the other roles lose theirs and
-- stay (roles are cluster-wide, other databases may grant to them). PUBLIC's CREATE on schema
-- public is not given back: Postgres 15 and later never had it.
DO $$
DECLARE
    name text;
BEGIN
    FOREACH name IN ARRAY ARRAY['qw_orchestrator', 'qw_scheduler', 'qw_dashboard', 'qw_metrics'] LOOP
        EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE ALL ON TABLES FROM %I', name);
        EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE ALL ON SEQUENCES FROM %I', name);
        EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA public FROM %I', name);
        EXECUTE format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM %I', name);
        EXECUTE format('REVOKE USAGE ON SCHEMA public FROM %I', name);
    END LOOP;
END
$$;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO qw_worker;
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO qw_worker;
