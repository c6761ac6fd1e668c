DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'qw_worker') THEN
        GRANT INSERT, UPDATE, DELETE ON qw_leadership TO qw_worker;
    END IF;
END
$$;
ALTER TABLE qw_leadership
    DROP COLUMN IF EXISTS backend_start,
    DROP COLUMN IF EXISTS backend_pid,
    DROP COLUMN IF EXISTS lease_until;
