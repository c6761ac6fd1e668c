-- Waiting in line for a queue's idle baton without an ERROR in the server log: a lock wait that
-- times out inside a PL/pgSQL exception block is caught there and never reported, where the same
-- timeout on a plain statement logged one ERROR line per idle worker per wait (about 1,400 a
-- minute with ten idle workers). The session-level lock, once taken, outlives the block.
CREATE FUNCTION qw_take_idle_baton(namespace integer, queue text, wait_ms integer) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('lock_timeout', greatest(wait_ms, 1)::text || 'ms', true);
    PERFORM pg_advisory_lock(namespace, hashtext(queue));
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END
$$;
