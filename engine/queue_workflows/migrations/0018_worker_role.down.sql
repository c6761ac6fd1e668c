-- The grants go; the role stays, since other databases on the server may still grant to it.
ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE USAGE, SELECT, UPDATE ON SEQUENCES FROM qw_worker;
ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE SELECT, INSERT, UPDATE, DELETE ON TABLES FROM qw_worker;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM qw_worker;
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM qw_worker;
REVOKE USAGE ON SCHEMA public FROM qw_worker;
