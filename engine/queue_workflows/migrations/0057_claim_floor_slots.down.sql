-- Back to 0052's floors: one session setting for all of a session's bands.
-- This session's live floors of one (table, queue, tenant): none once 5 s old or after a requeue.
CREATE OR REPLACE FUNCTION qw_claim_floors(p_table text, p_queue text, p_tenant text) RETURNS TABLE (priority integer, floor bigint)
    LANGUAGE sql STABLE AS $$
    SELECT substr(e.key, length(p.prefix) + 1)::integer, e.value::bigint
      FROM (SELECT nullif(current_setting('qw.claim_floors', true), '')::jsonb AS g,
                   p_table || chr(31) || p_queue || chr(31) || p_tenant || chr(31) AS prefix) AS p
     CROSS JOIN LATERAL jsonb_each_text(p.g -> 'f') AS e
     WHERE (p.g ->> 's')::bigint = (SELECT s.last_value FROM qw_requeue_seq AS s)
       AND (p.g ->> 't')::double precision > extract(epoch FROM now()) - 5
       AND left(e.key, length(p.prefix)) = p.prefix
$$;

-- Notes a claimed row as its band's floor in this session (a setting: it rolls back with the claim).
CREATE OR REPLACE FUNCTION qw_claim_floor_note(p_table text, p_queue text, p_tenant text, p_priority integer, p_id bigint) RETURNS boolean
    LANGUAGE plpgsql AS $$
DECLARE
    g jsonb := nullif(current_setting('qw.claim_floors', true), '')::jsonb;
    seq bigint := (SELECT s.last_value FROM qw_requeue_seq AS s);
    k text := p_table || chr(31) || p_queue || chr(31) || p_tenant || chr(31) || p_priority;
BEGIN
    IF EXISTS (SELECT FROM flow_limits AS fl WHERE fl.queue = p_queue) THEN
        RETURN true;
    END IF;
    IF g IS NULL OR (g ->> 's')::bigint IS DISTINCT FROM seq OR (g ->> 't')::double precision <= extract(epoch FROM now()) - 5
       OR (SELECT count(*) FROM jsonb_object_keys(g -> 'f')) >= 256 THEN
        g := jsonb_build_object('s', seq, 't', extract(epoch FROM now()), 'f', '{}'::jsonb);
    END IF;
    g := jsonb_set(g, ARRAY['f', k], to_jsonb(greatest(p_id, coalesce((g -> 'f' ->> k)::bigint, 0))));
    PERFORM set_config('qw.claim_floors', g::text, false);
    RETURN true;
END $$;

DROP FUNCTION qw_claim_floor_slot(text, text, text);
