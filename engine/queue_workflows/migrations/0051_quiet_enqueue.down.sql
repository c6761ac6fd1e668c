CREATE OR REPLACE FUNCTION qw_notify_job_ready() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_ARGV[0], NEW.queue);
    PERFORM pg_notify('qw_ready_' || NEW.queue, NEW.queue);
    RETURN NULL;
END
$$;
DROP TABLE IF EXISTS qw_wake_every_enqueue;
