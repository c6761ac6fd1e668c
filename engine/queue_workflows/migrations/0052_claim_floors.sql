-- Claims immune to a pinned horizon (docs/throughput.md, "Bloat"). While any snapshot stays open, a
-- claimed row's old version stays in the claim index, at the head of its band, and every probe of
-- that band walks it; vacuum cannot help. So each session keeps, per (table, queue, tenant, priority)
-- band, the id it last claimed there (its floor; nothing below it was claimable then) and the claim
-- starts its band's probes there. A floor is only a hint, dropped after 5 s, at once when any job of
-- any queue goes back to 'queued' (qw_requeue_seq moves at that commit), and for a band with nothing
-- left above it; a queue with flow limits never keeps one (admission leaves rows behind).
CREATE SEQUENCE qw_requeue_seq;
SELECT nextval('qw_requeue_seq');  -- called once, so that every later bump changes last_value
GRANT USAGE, SELECT ON SEQUENCE qw_requeue_seq TO qw_worker, qw_orchestrator, qw_scheduler, qw_dashboard;

CREATE FUNCTION qw_requeue_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM nextval('qw_requeue_seq');
    RETURN NULL;
END $$;
-- Deferred to commit, so the bump lands as close as it can to the moment the row becomes visible.
CREATE CONSTRAINT TRIGGER ingest_jobs_requeue_bump AFTER UPDATE OF status ON ingest_jobs DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.status = 'queued' AND OLD.status <> 'queued') EXECUTE FUNCTION qw_requeue_bump();
CREATE CONSTRAINT TRIGGER workflow_node_jobs_requeue_bump AFTER UPDATE OF status ON workflow_node_jobs DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.status = 'queued' AND OLD.status <> 'queued') EXECUTE FUNCTION qw_requeue_bump();

-- This session's live floors of one (table, queue, tenant): none once 5 s old or after a requeue.
CREATE FUNCTION qw_claim_floors(p_table text, p_queue text, p_tenant text) RETURNS TABLE (priority integer, floor bigint)
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
CREATE FUNCTION qw_claim_floor_note(p_table text, p_queue text, p_tenant text, p_priority integer, p_id bigint) RETURNS boolean
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

-- Autovacuum for the hot tables (docs/throughput.md, "Bloat"): vacuum by a fixed count of dead rows
-- rather than a share of a table that keeps millions of finished rows, without the cost delay, and
-- analyze as often, so the planner keeps seeing a short claimable queue. Room on every page for the
-- updates that change no indexed column (usage, heartbeats, leases) to stay HOT.
ALTER TABLE ingest_jobs SET (fillfactor = 90, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 100000,
    autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 20000, autovacuum_vacuum_cost_delay = 0);
ALTER TABLE workflow_node_jobs SET (fillfactor = 90, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 100000,
    autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 20000, autovacuum_vacuum_cost_delay = 0);
ALTER TABLE worker_heartbeats SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0);
ALTER TABLE qw_leadership SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0);
ALTER TABLE qw_orchestrators SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0);
ALTER TABLE tenant_shares SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0);
