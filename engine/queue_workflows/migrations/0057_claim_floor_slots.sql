-- Claim floors kept per (table, queue, tenant) in one of 256 session settings, chosen by a hash of
-- the three, instead of all of a session's floors in one: a claim read, and a note rewrote, a JSON
-- object of every band the session had claimed from (up to 256), so with 100 tenants claim +
-- completion ran at 0.74x a one-tenant queue's over 1,000,000 queued. Now each reads and writes its
-- own tenant's few bands; a slot that holds another tenant's floors (a hash collision) is simply
-- taken over. Same rules as 0052: a slot is dropped 5 s after it started and at once when
-- qw_requeue_seq moves; a queue with flow limits keeps none.
CREATE OR REPLACE FUNCTION qw_claim_floor_slot(p_table text, p_queue text, p_tenant text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'qw.claim_floor_' || (hashtext(p_table || chr(31) || p_queue || chr(31) || p_tenant) & 255)
$$;

CREATE OR REPLACE FUNCTION qw_claim_floors(p_table text, p_queue text, p_tenant text) RETURNS TABLE (priority integer, floor bigint)
    LANGUAGE sql STABLE AS $$
    SELECT e.key::integer, e.value::bigint
      FROM (SELECT nullif(current_setting(qw_claim_floor_slot(p_table, p_queue, p_tenant), true), '')::jsonb AS g
            OFFSET 0) AS p  -- parsed once, not once per use
     CROSS JOIN LATERAL jsonb_each_text(p.g -> 'f') AS e
     WHERE p.g ->> 'k' = p_table || chr(31) || p_queue || chr(31) || p_tenant
       AND (p.g ->> 's')::bigint = (SELECT s.last_value FROM qw_requeue_seq AS s)
       AND (p.g ->> 't')::double precision > extract(epoch FROM now()) - 5
$$;

CREATE OR REPLACE FUNCTION qw_claim_floor_note(p_table text, p_queue text, p_tenant text, p_priority integer, p_id bigint) RETURNS boolean
    LANGUAGE plpgsql AS $$
DECLARE
    k text := p_table || chr(31) || p_queue || chr(31) || p_tenant;
    slot text := qw_claim_floor_slot(p_table, p_queue, p_tenant);
    g jsonb := nullif(current_setting(slot, true), '')::jsonb;
    seq bigint := (SELECT s.last_value FROM qw_requeue_seq AS s);
BEGIN
    IF EXISTS (SELECT FROM flow_limits AS fl WHERE fl.queue = p_queue) THEN
        RETURN true;
    END IF;
    IF g IS NULL OR g ->> 'k' IS DISTINCT FROM k OR (g ->> 's')::bigint IS DISTINCT FROM seq
       OR (g ->> 't')::double precision <= extract(epoch FROM now()) - 5 THEN
        g := jsonb_build_object('k', k, 's', seq, 't', extract(epoch FROM now()), 'f', '{}'::jsonb);
    END IF;
    g := jsonb_set(g, ARRAY['f', p_priority::text], to_jsonb(greatest(p_id, coalesce((g -> 'f' ->> p_priority::text)::bigint, 0))));
    PERFORM set_config(slot, g::text, false);
    RETURN true;
END $$;
