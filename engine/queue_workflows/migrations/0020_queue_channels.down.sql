CREATE OR REPLACE FUNCTION qw_notify_job_ready() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_ARGV[0], NEW.queue);
    RETURN NULL;
END
$$;
