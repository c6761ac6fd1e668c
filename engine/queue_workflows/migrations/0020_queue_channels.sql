-- Each queue gets a channel of its own, 'qw_ready_<queue>', so an enqueue wakes only that
-- queue's workers (queue names are short lowercase identifiers, so the channel name is safe).
-- The table channel of contract 1 still fires, for any other listener.
CREATE OR REPLACE FUNCTION qw_notify_job_ready() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_ARGV[0], NEW.queue);
    PERFORM pg_notify('qw_ready_' || NEW.queue, NEW.queue);
    RETURN NULL;
END
$$;
