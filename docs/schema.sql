-- The engine's schema as migrations 0001-0057 leave a fresh database (pg_dump --schema-only).
-- Generated: do not edit. Regenerate with `python -m queue_workflows.ops.schema_dump` after adding a
-- migration; tests/test_schema_snapshot.py fails while this file and the migrations disagree.

CREATE FUNCTION public.qw_cancelled_run_guard() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    run_status text;
BEGIN
    SELECT status INTO run_status FROM workflow_runs WHERE id = NEW.run_id;
    IF run_status IN ('cancelled', 'failed') THEN
        NEW.status := 'cancelled';
        NEW.error := format('cancelled: run %s is %s', NEW.run_id, run_status);
        NEW.finished_at := now();
        NEW.claimed_by := NULL;
        NEW.claim_lock_key := NULL;
        NEW.lease_expires_at := NULL;
    END IF;
    RETURN NEW;
END
$$;

CREATE FUNCTION public.qw_child_output(child_id bigint, child_definition jsonb) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
    SELECT coalesce(jsonb_object_agg(j.node_name, coalesce(j.context_delta, '{}'::jsonb)), '{}'::jsonb)
      FROM workflow_node_jobs j
     WHERE j.run_id = child_id AND j.status = 'completed'
       AND NOT EXISTS (SELECT 1
                         FROM jsonb_array_elements(child_definition -> 'nodes') n,
                              jsonb_array_elements_text(coalesce(n -> 'deps', '[]'::jsonb)) d
                        WHERE d = j.node_name)
$$;

CREATE FUNCTION public.qw_child_run_ended() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    cause text;
BEGIN
    IF NEW.status = 'completed' THEN
        UPDATE workflow_node_jobs
           SET status = 'completed', context_delta = qw_child_output(NEW.id, NEW.definition), error = NULL,
               finished_at = now(), updated_at = now()
         WHERE run_id = NEW.parent_run_id AND node_name = NEW.parent_node AND status = 'waiting';
    ELSE
        IF NEW.status = 'failed' THEN
            SELECT format('node %L failed: %s', node_name, error) INTO cause FROM workflow_node_jobs
             WHERE run_id = NEW.id AND status = 'failed' ORDER BY finished_at, id LIMIT 1;
        END IF;
        cause := format('child run %s %s: %s', NEW.id, NEW.status, coalesce(cause, NEW.error, 'no error recorded'));
        IF length(cause) > 2000 THEN  -- a deep chain: keep where it starts and the cause at its end
            cause := left(cause, 500) || ' ... ' || right(cause, 1400);
        END IF;
        UPDATE workflow_node_jobs
           SET status = 'failed', finished_at = now(), updated_at = now(), error = cause
         WHERE run_id = NEW.parent_run_id AND node_name = NEW.parent_node AND status = 'waiting';
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION public.qw_child_run_tenant() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.parent_run_id IS NOT NULL THEN
        NEW.tenant := coalesce((SELECT r.tenant FROM workflow_runs r WHERE r.id = NEW.parent_run_id), NEW.tenant);
    END IF;
    RETURN NEW;
END
$$;

CREATE FUNCTION public.qw_claim_floor_note(p_table text, p_queue text, p_tenant text, p_priority integer, p_id bigint) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
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

CREATE FUNCTION public.qw_claim_floor_slot(p_table text, p_queue text, p_tenant text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT 'qw.claim_floor_' || (hashtext(p_table || chr(31) || p_queue || chr(31) || p_tenant) & 255)
$$;

CREATE FUNCTION public.qw_claim_floors(p_table text, p_queue text, p_tenant text) RETURNS TABLE(priority integer, floor bigint)
    LANGUAGE sql STABLE
    AS $$
    SELECT e.key::integer, e.value::bigint
      FROM (SELECT nullif(current_setting(qw_claim_floor_slot(p_table, p_queue, p_tenant), true), '')::jsonb AS g
            OFFSET 0) AS p  -- parsed once, not once per use
     CROSS JOIN LATERAL jsonb_each_text(p.g -> 'f') AS e
     WHERE p.g ->> 'k' = p_table || chr(31) || p_queue || chr(31) || p_tenant
       AND (p.g ->> 's')::bigint = (SELECT s.last_value FROM qw_requeue_seq AS s)
       AND (p.g ->> 't')::double precision > extract(epoch FROM now()) - 5
$$;

CREATE FUNCTION public.qw_deliver_event() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    run_status text;  -- every column below is the trigger's to set, whatever the INSERT gave
    taken bigint[];
    finished record;
BEGIN
    NEW.error := NULL;
    NEW.applied_to := NULL;
    IF jsonb_typeof(NEW.payload) IS DISTINCT FROM 'object' THEN
        NEW.error := format('an event payload must be a JSON object (it becomes the node''s output), not %s', jsonb_typeof(NEW.payload));
    ELSIF NEW.event_key = '' THEN
        NEW.error := 'an event key must not be empty';
    ELSIF NEW.run_id IS NOT NULL THEN
        SELECT status INTO run_status FROM workflow_runs WHERE id = NEW.run_id;
        IF run_status IS DISTINCT FROM 'running' THEN
            NEW.error := format('run %s is %s: it takes no events', NEW.run_id, coalesce(run_status, 'missing'));
        END IF;
    END IF;
    IF NEW.error IS NULL THEN
        WITH target AS (  -- locked in id order, as every writer of several waiting nodes does: no deadlock
            SELECT n.id FROM workflow_node_jobs n
             WHERE n.status = 'waiting' AND n.event_key = NEW.event_key AND (NEW.run_id IS NULL OR n.run_id = NEW.run_id)
               AND NOT EXISTS (SELECT 1 FROM workflow_events k
                                WHERE k.status = 'kept' AND k.event_key = n.event_key
                                  AND (k.run_id IS NULL OR k.run_id = n.run_id))
             ORDER BY n.id
               FOR UPDATE OF n
        ), done AS (
            UPDATE workflow_node_jobs n
               SET status = 'completed', context_delta = NEW.payload, error = NULL,
                   started_at = coalesce(n.started_at, n.created_at), finished_at = clock_timestamp(), updated_at = now()
              FROM target t
             WHERE n.id = t.id AND n.status = 'waiting'
            RETURNING n.id)
        SELECT array_agg(id ORDER BY id) INTO taken FROM done;
        IF taken IS NOT NULL THEN
            NEW.status := 'applied';
            NEW.applied_to := taken;
            NEW.processed_at := now();
            RETURN NEW;
        END IF;
        SELECT n.node_name, n.run_id, n.status INTO finished
          FROM workflow_node_jobs n JOIN workflow_runs r ON r.id = n.run_id AND r.status = 'running'
         WHERE n.event_key = NEW.event_key AND (NEW.run_id IS NULL OR n.run_id = NEW.run_id) AND n.status <> 'waiting'
         ORDER BY n.id LIMIT 1;
        IF FOUND THEN
            NEW.error := format('node %L of run %s waiting on key %L is already %s', finished.node_name, finished.run_id, NEW.event_key, finished.status);
        END IF;
    END IF;
    NEW.status := CASE WHEN NEW.error IS NULL THEN 'kept' ELSE 'rejected' END;
    NEW.processed_at := CASE WHEN NEW.error IS NULL THEN NULL ELSE now() END;
    RETURN NEW;
END
$$;

CREATE FUNCTION public.qw_flow_admit() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    lim flow_limits;
    k text;
    b flow_keys;
    running bigint;
    stamp timestamptz;
    avail double precision;
BEGIN
    SELECT * INTO lim FROM flow_limits WHERE queue = NEW.queue AND task = NEW.flow_scope;
    IF NOT FOUND THEN
        NEW.flow_scope := NULL;
        RETURN NEW;
    END IF;
    IF TG_TABLE_NAME = 'ingest_jobs' THEN
        k := qw_flow_key_of(NEW.concurrency_key, NEW.args, lim.key_path);
    ELSE
        k := qw_flow_key_of(NEW.concurrency_key, NEW.inputs, lim.key_path);
    END IF;
    IF current_setting('qw.flow_skip_locked', true) = 'on' THEN
        SELECT * INTO b FROM flow_keys WHERE queue = NEW.queue AND scope = lim.task AND key = k FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            INSERT INTO flow_keys (queue, scope, key, tokens) VALUES (NEW.queue, lim.task, k, lim.rate_count)
            ON CONFLICT DO NOTHING RETURNING * INTO b;
            IF NOT FOUND THEN
                RETURN NULL;
            END IF;
        END IF;
    ELSE
        INSERT INTO flow_keys AS f (queue, scope, key, tokens) VALUES (NEW.queue, lim.task, k, lim.rate_count)
        ON CONFLICT (queue, scope, key) DO UPDATE SET queue = EXCLUDED.queue WHERE false;
        SELECT * INTO b FROM flow_keys WHERE queue = NEW.queue AND scope = lim.task AND key = k;
    END IF;
    IF lim.max_running IS NOT NULL THEN
        running := (SELECT count(*) FROM ingest_jobs WHERE status = 'running' AND queue = NEW.queue AND flow_scope = lim.task AND flow_key = k)
                 + (SELECT count(*) FROM workflow_node_jobs WHERE status = 'running' AND queue = NEW.queue AND flow_scope = lim.task AND flow_key = k);
        IF running >= lim.max_running THEN
            RETURN NULL;
        END IF;
    END IF;
    IF lim.rate_count IS NOT NULL THEN
        stamp := greatest(clock_timestamp(), b.refilled_at);
        avail := least(lim.rate_count, coalesce(b.tokens, lim.rate_count)
                       + extract(epoch FROM stamp - b.refilled_at) * lim.rate_count / lim.rate_seconds);
        IF avail < 1 THEN
            RETURN NULL;
        END IF;
        UPDATE flow_keys SET tokens = avail - 1, refilled_at = stamp WHERE queue = NEW.queue AND scope = lim.task AND key = k;
    END IF;
    NEW.flow_key := k;
    RETURN NEW;
END $$;

CREATE FUNCTION public.qw_flow_blocked(p_queue text) RETURNS text[]
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    RETURN (SELECT coalesce(array_agg(DISTINCT b.tag), '{}')
      FROM (SELECT r.flow_scope || chr(31) || r.flow_key AS tag
              FROM (SELECT flow_scope, flow_key FROM ingest_jobs WHERE status = 'running' AND queue = p_queue AND flow_scope IS NOT NULL
                    UNION ALL
                    SELECT flow_scope, flow_key FROM workflow_node_jobs WHERE status = 'running' AND queue = p_queue AND flow_scope IS NOT NULL) AS r
              JOIN flow_limits AS l ON l.queue = p_queue AND l.task = r.flow_scope
             GROUP BY r.flow_scope, r.flow_key, l.max_running
            HAVING count(*) >= l.max_running
            UNION ALL
            SELECT k.scope || chr(31) || k.key FROM flow_limits AS l JOIN flow_keys AS k ON k.queue = l.queue AND k.scope = l.task
             WHERE l.queue = p_queue AND l.rate_count IS NOT NULL  -- from the few limits: no key is read without a rate
               AND least(l.rate_count, coalesce(k.tokens, l.rate_count)
                         + extract(epoch FROM clock_timestamp() - k.refilled_at) * l.rate_count / l.rate_seconds) < 1
            UNION ALL
            SELECT l.task || chr(29) FROM flow_limits AS l WHERE l.queue = p_queue AND l.max_running = 0) AS b);
END $$;

CREATE FUNCTION public.qw_flow_freed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    lim integer;
BEGIN
    SELECT max_running INTO lim FROM flow_limits WHERE queue = OLD.queue AND task = OLD.flow_scope;
    IF lim IS NOT NULL AND 1
         + (SELECT count(*) FROM ingest_jobs WHERE status = 'running' AND queue = OLD.queue AND flow_scope = OLD.flow_scope AND flow_key = OLD.flow_key)
         + (SELECT count(*) FROM workflow_node_jobs WHERE status = 'running' AND queue = OLD.queue AND flow_scope = OLD.flow_scope AND flow_key = OLD.flow_key)
         >= lim THEN
        PERFORM pg_notify('qw_ready_' || OLD.queue, OLD.queue);
    END IF;
    RETURN NULL;
END $$;

CREATE TABLE public.ingest_jobs (
    id bigint NOT NULL,
    task_name text NOT NULL,
    queue text NOT NULL,
    args jsonb DEFAULT '{}'::jsonb NOT NULL,
    reason text DEFAULT 'manual'::text NOT NULL,
    status text DEFAULT 'queued'::text NOT NULL,
    priority integer DEFAULT 0 NOT NULL,
    result jsonb,
    error text,
    attempts integer DEFAULT 0 NOT NULL,
    run_after timestamp with time zone DEFAULT now() NOT NULL,
    max_attempts integer DEFAULT 3 NOT NULL,
    claimed_by text,
    claim_lock_key integer,
    lease_expires_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    watchdog_trips integer DEFAULT 0 NOT NULL,
    dedup_key text,
    cpu_seconds double precision,
    peak_rss_bytes bigint,
    peak_vram_bytes bigint,
    model_load_seconds double precision,
    model_hit boolean,
    wall_seconds double precision,
    batch_suspect boolean DEFAULT false NOT NULL,
    concurrency_key text,
    flow_scope text,
    flow_key text,
    tenant text DEFAULT 'default'::text NOT NULL,
    oom_requeued boolean DEFAULT false NOT NULL,
    trace_context jsonb,
    CONSTRAINT ingest_jobs_concurrency_key_check CHECK ((length(concurrency_key) <= 200)),
    CONSTRAINT ingest_jobs_max_attempts_check CHECK ((max_attempts >= 1)),
    CONSTRAINT ingest_jobs_status_check CHECK ((status = ANY (ARRAY['scheduled'::text, 'queued'::text, 'running'::text, 'completed'::text, 'failed'::text, 'cancelled'::text]))),
    CONSTRAINT ingest_jobs_tenant_check CHECK ((tenant <> ''::text))
)
WITH (fillfactor='90', autovacuum_vacuum_scale_factor='0', autovacuum_vacuum_threshold='10000', autovacuum_vacuum_insert_scale_factor='0', autovacuum_vacuum_insert_threshold='100000', autovacuum_analyze_scale_factor='0', autovacuum_analyze_threshold='20000', autovacuum_vacuum_cost_delay='0');

CREATE FUNCTION public.qw_flow_held(j public.ingest_jobs, p_tasks text[]) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT CASE WHEN j.task_name = ANY(p_tasks) THEN j.task_name ELSE '*' END || chr(29) $$;

CREATE TABLE public.workflow_node_jobs (
    id bigint NOT NULL,
    run_id bigint,
    node_name text NOT NULL,
    node_module text,
    queue text NOT NULL,
    status text DEFAULT 'queued'::text NOT NULL,
    priority integer DEFAULT 0 NOT NULL,
    required_model text,
    inputs jsonb DEFAULT '{}'::jsonb NOT NULL,
    context_delta jsonb,
    error text,
    attempts integer DEFAULT 0 NOT NULL,
    run_after timestamp with time zone DEFAULT now() NOT NULL,
    max_attempts integer DEFAULT 3 NOT NULL,
    claimed_by text,
    claim_lock_key integer,
    lease_expires_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    watchdog_trips integer DEFAULT 0 NOT NULL,
    input_refs jsonb,
    budget_seconds double precision,
    cpu_seconds double precision,
    peak_rss_bytes bigint,
    peak_vram_bytes bigint,
    model_load_seconds double precision,
    model_hit boolean,
    wall_seconds double precision,
    unassignable_reason text,
    batch_suspect boolean DEFAULT false NOT NULL,
    map_node text,
    map_index integer,
    map_total integer,
    wake_at timestamp with time zone,
    event_key text,
    retry_policy jsonb,
    concurrency_key text,
    flow_scope text,
    flow_key text,
    tenant text DEFAULT 'default'::text NOT NULL,
    vram_gb double precision,
    gpus integer DEFAULT 1 NOT NULL,
    gpu_devices text[],
    vram_reserved_gb double precision,
    oom_requeued boolean DEFAULT false NOT NULL,
    trace_context jsonb,
    CONSTRAINT workflow_node_jobs_budget_seconds_check CHECK ((budget_seconds > (0)::double precision)),
    CONSTRAINT workflow_node_jobs_concurrency_key_check CHECK ((length(concurrency_key) <= 200)),
    CONSTRAINT workflow_node_jobs_gpus_range CHECK (((gpus >= 1) AND (gpus <= 64))),
    CONSTRAINT workflow_node_jobs_map_index_check CHECK ((map_index >= 0)),
    CONSTRAINT workflow_node_jobs_map_item_check CHECK (((map_node IS NULL) = (map_index IS NULL))),
    CONSTRAINT workflow_node_jobs_map_total_check CHECK ((map_total >= 0)),
    CONSTRAINT workflow_node_jobs_max_attempts_check CHECK ((max_attempts >= 1)),
    CONSTRAINT workflow_node_jobs_queue_check CHECK ((queue = ANY (ARRAY['cpu'::text, 'gpu'::text]))),
    CONSTRAINT workflow_node_jobs_retry_policy_check CHECK (((retry_policy IS NULL) OR (jsonb_typeof(retry_policy) = 'object'::text))),
    CONSTRAINT workflow_node_jobs_status_check CHECK ((status = ANY (ARRAY['scheduled'::text, 'queued'::text, 'running'::text, 'awaiting_input'::text, 'waiting'::text, 'completed'::text, 'failed'::text, 'cancelled'::text, 'skipped'::text]))),
    CONSTRAINT workflow_node_jobs_tenant_check CHECK ((tenant <> ''::text)),
    CONSTRAINT workflow_node_jobs_vram_gb_range CHECK (((vram_gb >= (0)::double precision) AND (vram_gb <= (100000)::double precision)))
)
WITH (fillfactor='90', autovacuum_vacuum_scale_factor='0', autovacuum_vacuum_threshold='10000', autovacuum_vacuum_insert_scale_factor='0', autovacuum_vacuum_insert_threshold='100000', autovacuum_analyze_scale_factor='0', autovacuum_analyze_threshold='20000', autovacuum_vacuum_cost_delay='0');

CREATE FUNCTION public.qw_flow_held(j public.workflow_node_jobs, p_tasks text[]) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT CASE WHEN j.node_name = ANY(p_tasks) THEN j.node_name ELSE '*' END || chr(29) $$;

CREATE FUNCTION public.qw_flow_key_of(p_key text, p_payload jsonb, p_path text) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT coalesce(p_key, p_payload #>> string_to_array(substr(p_path, 6), '.'), '')
$$;

CREATE FUNCTION public.qw_flow_path(p_queue text) RETURNS text[]
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    RETURN (SELECT string_to_array(substr(l.key_path, 6), '.') FROM flow_limits AS l
             WHERE l.queue = p_queue AND l.key_path IS NOT NULL
             ORDER BY l.task = '*' DESC, l.task LIMIT 1);
END $$;

CREATE FUNCTION public.qw_flow_scope(j public.ingest_jobs) RETURNS text
    LANGUAGE sql STABLE
    AS $$ SELECT qw_flow_scope(j.queue, j.task_name) $$;

CREATE FUNCTION public.qw_flow_scope(j public.workflow_node_jobs) RETURNS text
    LANGUAGE sql STABLE
    AS $$ SELECT qw_flow_scope(j.queue, j.node_name) $$;

CREATE FUNCTION public.qw_flow_scope(p_queue text, p_task text) RETURNS text
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    RETURN (SELECT l.task FROM flow_limits AS l
             WHERE l.queue = p_queue AND l.task IN (p_task, '*')
             ORDER BY l.task = '*' LIMIT 1);
END $$;

CREATE FUNCTION public.qw_flow_tag(j public.ingest_jobs, p_path text[], p_tasks text[]) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE WHEN j.task_name = ANY(p_tasks) THEN j.task_name ELSE '*' END || chr(31) || coalesce(j.concurrency_key, j.args #>> p_path, '')
$$;

CREATE FUNCTION public.qw_flow_tag(j public.workflow_node_jobs, p_path text[], p_tasks text[]) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE WHEN j.node_name = ANY(p_tasks) THEN j.node_name ELSE '*' END || chr(31) || coalesce(j.concurrency_key, j.inputs #>> p_path, '')
$$;

CREATE FUNCTION public.qw_flow_tasks(p_queue text) RETURNS text[]
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    RETURN (SELECT coalesce(array_agg(l.task), '{}') FROM flow_limits AS l WHERE l.queue = p_queue AND l.task <> '*');
END $$;

CREATE FUNCTION public.qw_gpu_job_need_gb(model text, own_gb double precision) RETURNS double precision
    LANGUAGE sql STABLE
    AS $$
    SELECT CASE WHEN model IS NULL THEN own_gb ELSE qw_gpu_need_gb(model) + coalesce(own_gb, 0) END
$$;

CREATE FUNCTION public.qw_gpu_learn() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    task_of text := qw_gpu_task(NEW.node_module, NEW.node_name);
    win record;
BEGIN
    SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY w.per_device_bytes) / 2^30 AS p95, count(*) AS n, min(w.finished_at) AS oldest
      INTO win
      FROM (SELECT s.per_device_bytes, s.finished_at
              FROM (SELECT * FROM (SELECT j.peak_vram_bytes / greatest(j.gpus, 1) AS per_device_bytes, j.finished_at FROM workflow_node_jobs AS j
                                    WHERE j.required_model = NEW.required_model AND qw_gpu_task(j.node_module, j.node_name) = task_of
                                      AND j.status = 'completed' AND j.peak_vram_bytes IS NOT NULL
                                    ORDER BY j.finished_at DESC LIMIT 50) AS hot
                    UNION ALL
                    SELECT * FROM (SELECT j.peak_vram_bytes / greatest(j.gpus, 1), j.finished_at FROM workflow_node_jobs_history AS j
                                    WHERE j.required_model = NEW.required_model AND qw_gpu_task(j.node_module, j.node_name) = task_of
                                      AND j.status = 'completed' AND j.peak_vram_bytes IS NOT NULL
                                    ORDER BY j.finished_at DESC LIMIT 50) AS moved) AS s
             ORDER BY s.finished_at DESC LIMIT 50) AS w;
    INSERT INTO gpu_task_vram AS t (model_id, task, p95_gb, samples, oldest_at)
    VALUES (NEW.required_model, task_of, win.p95, win.n, win.oldest)
    ON CONFLICT (model_id, task) DO UPDATE
       SET p95_gb = EXCLUDED.p95_gb, samples = EXCLUDED.samples, oldest_at = EXCLUDED.oldest_at, updated_at = now();
    INSERT INTO gpu_models AS m (model_id, learned_vram_gb, learned_samples)
    SELECT NEW.required_model, max(t.p95_gb) FILTER (WHERE t.samples >= 5), sum(t.samples)
      FROM gpu_task_vram AS t WHERE t.model_id = NEW.required_model
    ON CONFLICT (model_id) DO UPDATE
       SET learned_vram_gb = EXCLUDED.learned_vram_gb, learned_samples = EXCLUDED.learned_samples,
           oom_need_gb = CASE WHEN win.n >= 50 AND win.oldest > m.oom_at THEN NULL ELSE m.oom_need_gb END,
           oom_at = CASE WHEN win.n >= 50 AND win.oldest > m.oom_at THEN NULL ELSE m.oom_at END,
           updated_at = now();
    RETURN NULL;
END $$;

CREATE FUNCTION public.qw_gpu_need_gb(model text) RETURNS double precision
    LANGUAGE sql STABLE
    AS $$
    SELECT greatest(coalesce(m.learned_vram_gb, m.est_vram_gb), m.oom_need_gb) FROM gpu_models AS m WHERE m.model_id = model
$$;

CREATE FUNCTION public.qw_gpu_room_freed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF EXISTS (SELECT FROM workflow_node_jobs WHERE queue = OLD.queue AND status = 'queued') THEN
        PERFORM pg_notify('qw_ready_' || OLD.queue, OLD.queue);
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION public.qw_gpu_task(node_module text, node_name text) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT coalesce(node_module || '/', '') || node_name
$$;

CREATE FUNCTION public.qw_history_drop_before(p_before timestamp with time zone, p_batch integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    SET lock_timeout TO '2s'
    AS $_$
DECLARE
    part record;
    dropped integer := 0;
BEGIN
    FOR part IN
        SELECT c.relname
          FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent IN ('ingest_jobs_history'::regclass, 'workflow_node_jobs_history'::regclass)
           AND c.relname ~ '_p[0-9]{8}$'
           AND (to_date(right(c.relname, 8), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC' <= p_before
         ORDER BY c.relname
    LOOP
        BEGIN
            EXECUTE format('DROP TABLE %I', part.relname);
            dropped := dropped + 1;
        EXCEPTION WHEN lock_not_available THEN
            -- A reader holds it: the next step tries again, rather than queue readers behind more drops now.
            RAISE WARNING 'history partition % not dropped now (busy): %', part.relname, SQLERRM;
            EXIT;
        END;
    END LOOP;
    DELETE FROM ingest_jobs_history_default WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM ingest_jobs_history_default WHERE finished_at < p_before OR finished_at IS NULL LIMIT p_batch));
    DELETE FROM workflow_node_jobs_history_default WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM workflow_node_jobs_history_default WHERE finished_at < p_before OR finished_at IS NULL LIMIT p_batch));
    RETURN dropped;
END $_$;

CREATE FUNCTION public.qw_history_ensure_partitions(p_from date, p_to date) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    SET lock_timeout TO '2s'
    AS $$
DECLARE
    d date;
    t text;
    made integer := 0;
BEGIN
    FOR d IN SELECT generate_series(p_from, p_to, interval '1 day')::date LOOP
        FOREACH t IN ARRAY ARRAY['ingest_jobs_history', 'workflow_node_jobs_history'] LOOP
            CONTINUE WHEN to_regclass(t || '_p' || to_char(d, 'YYYYMMDD')) IS NOT NULL;
            BEGIN
                EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                               t || '_p' || to_char(d, 'YYYYMMDD'), t,
                               (d::timestamp AT TIME ZONE 'UTC'), ((d + 1)::timestamp AT TIME ZONE 'UTC'));
                made := made + 1;
            EXCEPTION WHEN check_violation OR lock_not_available THEN
                -- Rows of that day already sit in the default partition; they stay there until retention.
                RAISE WARNING 'history partition %_p% not made: %', t, to_char(d, 'YYYYMMDD'), SQLERRM;
            END;
        END LOOP;
    END LOOP;
    RETURN made;
END $$;

CREATE FUNCTION public.qw_node_run_tenant() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.run_id IS NOT NULL THEN
        NEW.tenant := coalesce((SELECT r.tenant FROM workflow_runs r WHERE r.id = NEW.run_id), NEW.tenant);
    END IF;
    RETURN NEW;
END
$$;

CREATE FUNCTION public.qw_notify_input_submission() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('qw_input', NEW.run_id::text);
    RETURN NULL;
END
$$;

CREATE FUNCTION public.qw_notify_job_ready() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    -- The lock first: the table is then read with a snapshot taken after it was granted.
    IF pg_try_advisory_xact_lock_shared(20825, hashtext(NEW.queue))
       AND NOT EXISTS (SELECT FROM qw_wake_every_enqueue WHERE queue = NEW.queue) THEN
        RETURN NULL;
    END IF;
    PERFORM pg_notify(TG_ARGV[0], NEW.queue);
    PERFORM pg_notify('qw_ready_' || NEW.queue, NEW.queue);
    RETURN NULL;
END
$$;

CREATE FUNCTION public.qw_notify_job_revoked() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('qw_job_revoked', OLD.id || ':' || OLD.claimed_by);
    RETURN NULL;
END
$$;

CREATE FUNCTION public.qw_notify_timer() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('qw_timer', TG_TABLE_NAME);
    RETURN NULL;
END
$$;

CREATE FUNCTION public.qw_notify_worker_control() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    target record;
BEGIN
    IF TG_OP = 'DELETE' THEN target := OLD; ELSE target := NEW; END IF;
    PERFORM pg_notify('qw_worker_control', target.host_label || ':' || target.queue);
    RETURN NULL;
END
$$;

CREATE FUNCTION public.qw_parent_node_ended() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    child_id bigint;
    reason text;
BEGIN
    reason := format('cancelled: its parent run %s node %s is %s', NEW.run_id, NEW.node_name, NEW.status);
    UPDATE workflow_runs
       SET status = 'cancelled', error = reason, finished_at = now(), updated_at = now()
     WHERE parent_run_id = NEW.run_id AND parent_node = NEW.node_name
       AND status NOT IN ('completed', 'failed', 'cancelled')
    RETURNING id INTO child_id;
    IF child_id IS NOT NULL THEN
        UPDATE workflow_node_jobs
           SET status = 'cancelled', error = reason, finished_at = now(), lease_expires_at = NULL, updated_at = now()
         WHERE run_id = child_id AND status IN ('scheduled', 'queued', 'awaiting_input', 'waiting');
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION public.qw_record_dispatch_event() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO workflow_dispatch_events (run_id, node_job_id, node_name, kind)
    VALUES (NEW.run_id, NEW.id, NEW.node_name, NEW.status);
    PERFORM pg_notify('qw_dispatch', NEW.run_id::text);
    RETURN NULL;
END
$$;

CREATE FUNCTION public.qw_record_job_event() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO job_events (job_table, job_id, from_status, to_status, attempts, worker_id, error)
    VALUES (TG_TABLE_NAME, NEW.id, OLD.status, NEW.status, NEW.attempts, OLD.claimed_by,
            CASE WHEN NEW.error IS DISTINCT FROM OLD.error THEN left(NEW.error, 2000) END);
    RETURN NULL;
END
$$;

CREATE FUNCTION public.qw_requeue_bump() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM nextval('qw_requeue_seq');
    RETURN NULL;
END $$;

CREATE FUNCTION public.qw_schedule_future_job() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    NEW.status := 'scheduled';
    RETURN NEW;
END
$$;

CREATE FUNCTION public.qw_take_idle_baton(namespace integer, queue text, wait_ms integer) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM set_config('lock_timeout', greatest(wait_ms, 1)::text || 'ms', true);
    PERFORM pg_advisory_lock(namespace, hashtext(queue));
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END
$$;

CREATE FUNCTION public.qw_tenant_floor(q text) RETURNS double precision
    LANGUAGE sql STABLE
    AS $$
    SELECT a.vtime FROM tenant_shares AS a WHERE a.queue = q AND a.active ORDER BY a.vtime LIMIT 1;
$$;

CREATE FUNCTION public.qw_tenant_requeued() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM qw_tenants_activate(ARRAY[ARRAY[NEW.queue, NEW.tenant]]);
    RETURN NULL;
END
$$;

CREATE FUNCTION public.qw_tenants_activate(pairs text[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO tenant_shares AS s (queue, tenant, vtime)
    SELECT n.queue, n.tenant, coalesce(qw_tenant_floor(n.queue), 0)
      FROM (SELECT DISTINCT pairs[i][1] AS queue, pairs[i][2] AS tenant FROM generate_subscripts(pairs, 1) AS i) AS n
     WHERE NOT EXISTS (SELECT FROM tenant_shares AS x WHERE x.queue = n.queue AND x.tenant = n.tenant AND x.active)
     ORDER BY n.queue, n.tenant  -- rows locked in one order: concurrent enqueues cannot deadlock
    ON CONFLICT (queue, tenant) DO UPDATE SET active = true, vtime = greatest(s.vtime, EXCLUDED.vtime), updated_at = now()
     WHERE NOT s.active;
END
$$;

CREATE FUNCTION public.qw_tenants_inserted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM qw_tenants_activate(ARRAY(SELECT ARRAY[r.queue, r.tenant] FROM new_rows AS r WHERE r.status = 'queued' GROUP BY r.queue, r.tenant));
    RETURN NULL;
END
$$;

CREATE TABLE public.flow_keys (
    queue text NOT NULL,
    scope text NOT NULL,
    key text NOT NULL,
    tokens double precision,
    refilled_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.flow_limits (
    queue text NOT NULL,
    task text DEFAULT '*'::text NOT NULL,
    key_path text,
    max_running integer,
    rate_count integer,
    rate_seconds double precision,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT flow_limits_key_path_check CHECK ((key_path ~ '^args(\.[A-Za-z0-9_-]{1,64}){1,8}$'::text)),
    CONSTRAINT flow_limits_max_running_check CHECK ((max_running >= 0)),
    CONSTRAINT flow_limits_queue_check CHECK ((queue ~ '^[A-Za-z_][A-Za-z0-9_.:-]{0,127}$'::text)),
    CONSTRAINT flow_limits_rate_count_check CHECK ((rate_count >= 1)),
    CONSTRAINT flow_limits_rate_seconds_check CHECK (((rate_seconds > (0)::double precision) AND (rate_seconds <= (86400)::double precision))),
    CONSTRAINT flow_limits_rate_whole CHECK (((rate_count IS NULL) = (rate_seconds IS NULL))),
    CONSTRAINT flow_limits_some_limit CHECK (((max_running IS NOT NULL) OR (rate_count IS NOT NULL))),
    CONSTRAINT flow_limits_task_check CHECK (((task = '*'::text) OR (task ~ '^[A-Za-z_][A-Za-z0-9_.:-]{0,127}$'::text)))
);

CREATE TABLE public.gpu_claim_turns (
    queue text NOT NULL
);

CREATE TABLE public.gpu_models (
    model_id text NOT NULL,
    est_vram_gb double precision,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    learned_vram_gb double precision,
    learned_samples integer DEFAULT 0 NOT NULL,
    oom_need_gb double precision,
    oom_at timestamp with time zone,
    CONSTRAINT gpu_models_est_vram_gb_check CHECK ((est_vram_gb >= (0)::double precision)),
    CONSTRAINT gpu_models_learned_vram_gb_check CHECK ((learned_vram_gb >= (0)::double precision)),
    CONSTRAINT gpu_models_oom_need_gb_check CHECK ((oom_need_gb >= (0)::double precision))
);

CREATE TABLE public.gpu_task_vram (
    model_id text NOT NULL,
    task text NOT NULL,
    p95_gb double precision NOT NULL,
    samples integer NOT NULL,
    oldest_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.host_metrics (
    host_label text NOT NULL,
    payload_version integer NOT NULL,
    payload jsonb NOT NULL,
    sampled_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.ingest_jobs_history (
    id bigint NOT NULL,
    task_name text NOT NULL,
    queue text NOT NULL,
    args jsonb NOT NULL,
    reason text NOT NULL,
    status text NOT NULL,
    priority integer NOT NULL,
    result jsonb,
    error text,
    attempts integer NOT NULL,
    run_after timestamp with time zone NOT NULL,
    max_attempts integer NOT NULL,
    claimed_by text,
    claim_lock_key integer,
    lease_expires_at timestamp with time zone,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    watchdog_trips integer NOT NULL,
    dedup_key text,
    cpu_seconds double precision,
    peak_rss_bytes bigint,
    peak_vram_bytes bigint,
    model_load_seconds double precision,
    model_hit boolean,
    wall_seconds double precision,
    batch_suspect boolean NOT NULL,
    concurrency_key text,
    flow_scope text,
    flow_key text,
    tenant text NOT NULL,
    oom_requeued boolean NOT NULL,
    trace_context jsonb
)
PARTITION BY RANGE (finished_at);

CREATE VIEW public.ingest_jobs_all AS
 SELECT ingest_jobs.id,
    ingest_jobs.task_name,
    ingest_jobs.queue,
    ingest_jobs.args,
    ingest_jobs.reason,
    ingest_jobs.status,
    ingest_jobs.priority,
    ingest_jobs.result,
    ingest_jobs.error,
    ingest_jobs.attempts,
    ingest_jobs.run_after,
    ingest_jobs.max_attempts,
    ingest_jobs.claimed_by,
    ingest_jobs.claim_lock_key,
    ingest_jobs.lease_expires_at,
    ingest_jobs.created_at,
    ingest_jobs.updated_at,
    ingest_jobs.started_at,
    ingest_jobs.finished_at,
    ingest_jobs.watchdog_trips,
    ingest_jobs.dedup_key,
    ingest_jobs.cpu_seconds,
    ingest_jobs.peak_rss_bytes,
    ingest_jobs.peak_vram_bytes,
    ingest_jobs.model_load_seconds,
    ingest_jobs.model_hit,
    ingest_jobs.wall_seconds,
    ingest_jobs.batch_suspect,
    ingest_jobs.concurrency_key,
    ingest_jobs.flow_scope,
    ingest_jobs.flow_key,
    ingest_jobs.tenant,
    ingest_jobs.oom_requeued,
    ingest_jobs.trace_context
   FROM public.ingest_jobs
UNION ALL
 SELECT ingest_jobs_history.id,
    ingest_jobs_history.task_name,
    ingest_jobs_history.queue,
    ingest_jobs_history.args,
    ingest_jobs_history.reason,
    ingest_jobs_history.status,
    ingest_jobs_history.priority,
    ingest_jobs_history.result,
    ingest_jobs_history.error,
    ingest_jobs_history.attempts,
    ingest_jobs_history.run_after,
    ingest_jobs_history.max_attempts,
    ingest_jobs_history.claimed_by,
    ingest_jobs_history.claim_lock_key,
    ingest_jobs_history.lease_expires_at,
    ingest_jobs_history.created_at,
    ingest_jobs_history.updated_at,
    ingest_jobs_history.started_at,
    ingest_jobs_history.finished_at,
    ingest_jobs_history.watchdog_trips,
    ingest_jobs_history.dedup_key,
    ingest_jobs_history.cpu_seconds,
    ingest_jobs_history.peak_rss_bytes,
    ingest_jobs_history.peak_vram_bytes,
    ingest_jobs_history.model_load_seconds,
    ingest_jobs_history.model_hit,
    ingest_jobs_history.wall_seconds,
    ingest_jobs_history.batch_suspect,
    ingest_jobs_history.concurrency_key,
    ingest_jobs_history.flow_scope,
    ingest_jobs_history.flow_key,
    ingest_jobs_history.tenant,
    ingest_jobs_history.oom_requeued,
    ingest_jobs_history.trace_context
   FROM public.ingest_jobs_history;

CREATE TABLE public.ingest_jobs_history_default (
    id bigint NOT NULL,
    task_name text NOT NULL,
    queue text NOT NULL,
    args jsonb NOT NULL,
    reason text NOT NULL,
    status text NOT NULL,
    priority integer NOT NULL,
    result jsonb,
    error text,
    attempts integer NOT NULL,
    run_after timestamp with time zone NOT NULL,
    max_attempts integer NOT NULL,
    claimed_by text,
    claim_lock_key integer,
    lease_expires_at timestamp with time zone,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    watchdog_trips integer NOT NULL,
    dedup_key text,
    cpu_seconds double precision,
    peak_rss_bytes bigint,
    peak_vram_bytes bigint,
    model_load_seconds double precision,
    model_hit boolean,
    wall_seconds double precision,
    batch_suspect boolean NOT NULL,
    concurrency_key text,
    flow_scope text,
    flow_key text,
    tenant text NOT NULL,
    oom_requeued boolean NOT NULL,
    trace_context jsonb
);

CREATE SEQUENCE public.ingest_jobs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.ingest_jobs_id_seq OWNED BY public.ingest_jobs.id;

CREATE TABLE public.job_events (
    id bigint NOT NULL,
    job_table text NOT NULL,
    job_id bigint NOT NULL,
    from_status text,
    to_status text NOT NULL,
    attempts integer NOT NULL,
    worker_id text,
    error text,
    at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT job_events_job_table_check CHECK ((job_table = ANY (ARRAY['ingest_jobs'::text, 'workflow_node_jobs'::text])))
);

CREATE SEQUENCE public.job_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.job_events_id_seq OWNED BY public.job_events.id;

CREATE TABLE public.workflow_node_jobs_history (
    id bigint NOT NULL,
    run_id bigint,
    node_name text NOT NULL,
    node_module text,
    queue text NOT NULL,
    status text NOT NULL,
    priority integer NOT NULL,
    required_model text,
    inputs jsonb NOT NULL,
    context_delta jsonb,
    error text,
    attempts integer NOT NULL,
    run_after timestamp with time zone NOT NULL,
    max_attempts integer NOT NULL,
    claimed_by text,
    claim_lock_key integer,
    lease_expires_at timestamp with time zone,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    watchdog_trips integer NOT NULL,
    input_refs jsonb,
    budget_seconds double precision,
    cpu_seconds double precision,
    peak_rss_bytes bigint,
    peak_vram_bytes bigint,
    model_load_seconds double precision,
    model_hit boolean,
    wall_seconds double precision,
    unassignable_reason text,
    batch_suspect boolean NOT NULL,
    map_node text,
    map_index integer,
    map_total integer,
    wake_at timestamp with time zone,
    event_key text,
    retry_policy jsonb,
    concurrency_key text,
    flow_scope text,
    flow_key text,
    tenant text NOT NULL,
    vram_gb double precision,
    gpus integer NOT NULL,
    gpu_devices text[],
    vram_reserved_gb double precision,
    oom_requeued boolean NOT NULL,
    trace_context jsonb
)
PARTITION BY RANGE (finished_at);

CREATE VIEW public.workflow_node_jobs_all AS
 SELECT workflow_node_jobs.id,
    workflow_node_jobs.run_id,
    workflow_node_jobs.node_name,
    workflow_node_jobs.node_module,
    workflow_node_jobs.queue,
    workflow_node_jobs.status,
    workflow_node_jobs.priority,
    workflow_node_jobs.required_model,
    workflow_node_jobs.inputs,
    workflow_node_jobs.context_delta,
    workflow_node_jobs.error,
    workflow_node_jobs.attempts,
    workflow_node_jobs.run_after,
    workflow_node_jobs.max_attempts,
    workflow_node_jobs.claimed_by,
    workflow_node_jobs.claim_lock_key,
    workflow_node_jobs.lease_expires_at,
    workflow_node_jobs.created_at,
    workflow_node_jobs.updated_at,
    workflow_node_jobs.started_at,
    workflow_node_jobs.finished_at,
    workflow_node_jobs.watchdog_trips,
    workflow_node_jobs.input_refs,
    workflow_node_jobs.budget_seconds,
    workflow_node_jobs.cpu_seconds,
    workflow_node_jobs.peak_rss_bytes,
    workflow_node_jobs.peak_vram_bytes,
    workflow_node_jobs.model_load_seconds,
    workflow_node_jobs.model_hit,
    workflow_node_jobs.wall_seconds,
    workflow_node_jobs.unassignable_reason,
    workflow_node_jobs.batch_suspect,
    workflow_node_jobs.map_node,
    workflow_node_jobs.map_index,
    workflow_node_jobs.map_total,
    workflow_node_jobs.wake_at,
    workflow_node_jobs.event_key,
    workflow_node_jobs.retry_policy,
    workflow_node_jobs.concurrency_key,
    workflow_node_jobs.flow_scope,
    workflow_node_jobs.flow_key,
    workflow_node_jobs.tenant,
    workflow_node_jobs.vram_gb,
    workflow_node_jobs.gpus,
    workflow_node_jobs.gpu_devices,
    workflow_node_jobs.vram_reserved_gb,
    workflow_node_jobs.oom_requeued,
    workflow_node_jobs.trace_context
   FROM public.workflow_node_jobs
UNION ALL
 SELECT workflow_node_jobs_history.id,
    workflow_node_jobs_history.run_id,
    workflow_node_jobs_history.node_name,
    workflow_node_jobs_history.node_module,
    workflow_node_jobs_history.queue,
    workflow_node_jobs_history.status,
    workflow_node_jobs_history.priority,
    workflow_node_jobs_history.required_model,
    workflow_node_jobs_history.inputs,
    workflow_node_jobs_history.context_delta,
    workflow_node_jobs_history.error,
    workflow_node_jobs_history.attempts,
    workflow_node_jobs_history.run_after,
    workflow_node_jobs_history.max_attempts,
    workflow_node_jobs_history.claimed_by,
    workflow_node_jobs_history.claim_lock_key,
    workflow_node_jobs_history.lease_expires_at,
    workflow_node_jobs_history.created_at,
    workflow_node_jobs_history.updated_at,
    workflow_node_jobs_history.started_at,
    workflow_node_jobs_history.finished_at,
    workflow_node_jobs_history.watchdog_trips,
    workflow_node_jobs_history.input_refs,
    workflow_node_jobs_history.budget_seconds,
    workflow_node_jobs_history.cpu_seconds,
    workflow_node_jobs_history.peak_rss_bytes,
    workflow_node_jobs_history.peak_vram_bytes,
    workflow_node_jobs_history.model_load_seconds,
    workflow_node_jobs_history.model_hit,
    workflow_node_jobs_history.wall_seconds,
    workflow_node_jobs_history.unassignable_reason,
    workflow_node_jobs_history.batch_suspect,
    workflow_node_jobs_history.map_node,
    workflow_node_jobs_history.map_index,
    workflow_node_jobs_history.map_total,
    workflow_node_jobs_history.wake_at,
    workflow_node_jobs_history.event_key,
    workflow_node_jobs_history.retry_policy,
    workflow_node_jobs_history.concurrency_key,
    workflow_node_jobs_history.flow_scope,
    workflow_node_jobs_history.flow_key,
    workflow_node_jobs_history.tenant,
    workflow_node_jobs_history.vram_gb,
    workflow_node_jobs_history.gpus,
    workflow_node_jobs_history.gpu_devices,
    workflow_node_jobs_history.vram_reserved_gb,
    workflow_node_jobs_history.oom_requeued,
    workflow_node_jobs_history.trace_context
   FROM public.workflow_node_jobs_history;

CREATE VIEW public.node_events AS
 SELECT e.id,
    j.run_id,
    j.node_name,
    e.job_id,
    e.from_status,
    e.to_status,
    e.attempts,
    e.worker_id,
    e.error,
    e.at
   FROM (public.job_events e
     JOIN public.workflow_node_jobs_all j ON (((e.job_table = 'workflow_node_jobs'::text) AND (j.id = e.job_id))))
  WHERE (j.run_id IS NOT NULL);

CREATE TABLE public.queue_schema_version (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.qw_leadership (
    id smallint DEFAULT 1 NOT NULL,
    epoch bigint DEFAULT 0 NOT NULL,
    leader_id text,
    since timestamp with time zone,
    lease_until timestamp with time zone,
    backend_pid integer,
    backend_start timestamp with time zone,
    CONSTRAINT qw_leadership_id_check CHECK ((id = 1))
)
WITH (fillfactor='50', autovacuum_vacuum_scale_factor='0', autovacuum_vacuum_threshold='1000', autovacuum_vacuum_cost_delay='0');

CREATE TABLE public.qw_orchestrators (
    orchestrator_id text NOT NULL,
    hostname text NOT NULL,
    host_label text NOT NULL,
    pid integer NOT NULL,
    role text DEFAULT 'standby'::text NOT NULL,
    epoch bigint,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    beat_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT qw_orchestrators_role_check CHECK ((role = ANY (ARRAY['leader'::text, 'standby'::text])))
)
WITH (fillfactor='50', autovacuum_vacuum_scale_factor='0', autovacuum_vacuum_threshold='1000', autovacuum_vacuum_cost_delay='0');

CREATE SEQUENCE public.qw_requeue_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

CREATE TABLE public.qw_wake_every_enqueue (
    queue text NOT NULL,
    added_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.qw_worker_exits (
    id bigint NOT NULL,
    worker_id text NOT NULL,
    host_label text NOT NULL,
    queue text NOT NULL,
    code integer NOT NULL,
    job_id bigint,
    reason text,
    at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT qw_worker_exits_code_check CHECK (((code >= 0) AND (code <= 255))),
    CONSTRAINT qw_worker_exits_reason_check CHECK ((length(reason) <= 2000))
);

CREATE SEQUENCE public.qw_worker_exits_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.qw_worker_exits_id_seq OWNED BY public.qw_worker_exits.id;

CREATE VIEW public.qw_worker_sessions AS
 SELECT DISTINCT (objid)::bigint AS lock_key
   FROM pg_locks l
  WHERE ((locktype = 'advisory'::text) AND granted AND (objsubid = 2) AND ((classid)::bigint = 20823) AND (database = ( SELECT pg_database.oid
           FROM pg_database
          WHERE (pg_database.datname = current_database()))) AND (NOT (EXISTS ( SELECT 1
           FROM pg_stat_activity a
          WHERE ((a.pid = l.pid) AND (NOT pg_has_role(a.usesysid, 'qw_worker'::name, 'MEMBER'::text)) AND (a.usesysid IS DISTINCT FROM ( SELECT c.relowner
                   FROM pg_class c
                  WHERE (c.oid = (to_regclass('qw_worker_sessions'::text))::oid))))))));

CREATE TABLE public.schedule_entry_turns (
    entry_name text NOT NULL
);

CREATE TABLE public.schedule_slots (
    entry_name text NOT NULL,
    slot_time timestamp with time zone NOT NULL,
    kind text NOT NULL,
    task_name text NOT NULL,
    queue text NOT NULL,
    job_id bigint,
    enqueued_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT schedule_slots_kind_check CHECK ((kind = ANY (ARRAY['slot'::text, 'catch_up'::text, 'boot'::text])))
);

CREATE TABLE public.tenant_shares (
    queue text NOT NULL,
    tenant text NOT NULL,
    vtime double precision DEFAULT 0 NOT NULL,
    served bigint DEFAULT 0 NOT NULL,
    active boolean DEFAULT true NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
)
WITH (fillfactor='50', autovacuum_vacuum_scale_factor='0', autovacuum_vacuum_threshold='1000', autovacuum_vacuum_cost_delay='0');

CREATE TABLE public.tenant_weights (
    tenant text NOT NULL,
    weight double precision NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT tenant_weights_tenant_check CHECK ((tenant <> ''::text)),
    CONSTRAINT tenant_weights_weight_range CHECK (((weight > (0)::double precision) AND (weight <= (10000)::double precision)))
);

CREATE TABLE public.worker_controls (
    host_label text NOT NULL,
    queue text NOT NULL,
    desired_state text DEFAULT 'on'::text NOT NULL,
    stop_policy text DEFAULT 'hard'::text NOT NULL,
    requested_by text,
    reason text,
    device_check_pending boolean DEFAULT false NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT worker_controls_desired_state_check CHECK ((desired_state = ANY (ARRAY['on'::text, 'off'::text]))),
    CONSTRAINT worker_controls_stop_policy_check CHECK ((stop_policy = ANY (ARRAY['hard'::text, 'park'::text])))
);

CREATE TABLE public.worker_heartbeats (
    worker_id text NOT NULL,
    host_label text NOT NULL,
    queue text NOT NULL,
    pid integer NOT NULL,
    lock_key integer NOT NULL,
    state text DEFAULT 'idle'::text NOT NULL,
    current_job_id bigint,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    last_seen timestamp with time zone DEFAULT now() NOT NULL,
    last_flagged_dead_at timestamp with time zone,
    loaded_models text[] DEFAULT '{}'::text[] NOT NULL,
    swapping boolean DEFAULT false NOT NULL,
    vram_total_gb double precision,
    vram_free_gb double precision,
    gpu_devices jsonb,
    CONSTRAINT worker_heartbeats_state_check CHECK ((state = ANY (ARRAY['idle'::text, 'busy'::text, 'stopping'::text, 'parked'::text, 'throttled'::text])))
)
WITH (fillfactor='50', autovacuum_vacuum_scale_factor='0', autovacuum_vacuum_threshold='1000', autovacuum_vacuum_cost_delay='0');

CREATE SEQUENCE public.worker_lock_key_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
    CYCLE;

CREATE TABLE public.workflow_dispatch_events (
    id bigint NOT NULL,
    run_id bigint NOT NULL,
    node_job_id bigint NOT NULL,
    node_name text NOT NULL,
    kind text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    last_error text,
    next_attempt_at timestamp with time zone DEFAULT now() NOT NULL,
    poisoned_at timestamp with time zone,
    processed_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT workflow_dispatch_events_kind_check CHECK ((kind = ANY (ARRAY['completed'::text, 'failed'::text, 'cancelled'::text])))
);

CREATE SEQUENCE public.workflow_dispatch_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.workflow_dispatch_events_id_seq OWNED BY public.workflow_dispatch_events.id;

CREATE TABLE public.workflow_events (
    id bigint NOT NULL,
    event_key text NOT NULL,
    run_id bigint,
    payload jsonb NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    error text,
    applied_to bigint[],
    requested_by text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    processed_at timestamp with time zone,
    CONSTRAINT workflow_events_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'kept'::text, 'applied'::text, 'rejected'::text])))
);

CREATE SEQUENCE public.workflow_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.workflow_events_id_seq OWNED BY public.workflow_events.id;

CREATE TABLE public.workflow_input_submissions (
    id bigint NOT NULL,
    run_id bigint NOT NULL,
    node_name text NOT NULL,
    value jsonb NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    error text,
    claimed_by text,
    claimed_at timestamp with time zone,
    processed_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT workflow_input_submissions_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'processing'::text, 'applied'::text, 'rejected'::text])))
);

CREATE SEQUENCE public.workflow_input_submissions_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.workflow_input_submissions_id_seq OWNED BY public.workflow_input_submissions.id;

CREATE TABLE public.workflow_node_jobs_history_default (
    id bigint NOT NULL,
    run_id bigint,
    node_name text NOT NULL,
    node_module text,
    queue text NOT NULL,
    status text NOT NULL,
    priority integer NOT NULL,
    required_model text,
    inputs jsonb NOT NULL,
    context_delta jsonb,
    error text,
    attempts integer NOT NULL,
    run_after timestamp with time zone NOT NULL,
    max_attempts integer NOT NULL,
    claimed_by text,
    claim_lock_key integer,
    lease_expires_at timestamp with time zone,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    watchdog_trips integer NOT NULL,
    input_refs jsonb,
    budget_seconds double precision,
    cpu_seconds double precision,
    peak_rss_bytes bigint,
    peak_vram_bytes bigint,
    model_load_seconds double precision,
    model_hit boolean,
    wall_seconds double precision,
    unassignable_reason text,
    batch_suspect boolean NOT NULL,
    map_node text,
    map_index integer,
    map_total integer,
    wake_at timestamp with time zone,
    event_key text,
    retry_policy jsonb,
    concurrency_key text,
    flow_scope text,
    flow_key text,
    tenant text NOT NULL,
    vram_gb double precision,
    gpus integer NOT NULL,
    gpu_devices text[],
    vram_reserved_gb double precision,
    oom_requeued boolean NOT NULL,
    trace_context jsonb
);

CREATE SEQUENCE public.workflow_node_jobs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.workflow_node_jobs_id_seq OWNED BY public.workflow_node_jobs.id;

CREATE TABLE public.workflow_run_actions (
    id bigint NOT NULL,
    run_id bigint NOT NULL,
    action text NOT NULL,
    node_name text,
    requested_by text,
    detail text,
    at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT workflow_run_actions_action_check CHECK ((action = ANY (ARRAY['cancel'::text, 'restart'::text, 'input'::text])))
);

CREATE SEQUENCE public.workflow_run_actions_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.workflow_run_actions_id_seq OWNED BY public.workflow_run_actions.id;

CREATE TABLE public.workflow_runs (
    id bigint NOT NULL,
    workflow_name text NOT NULL,
    status text DEFAULT 'queued'::text NOT NULL,
    params jsonb DEFAULT '{}'::jsonb NOT NULL,
    context jsonb DEFAULT '{}'::jsonb NOT NULL,
    parcel_id text,
    error text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    definition jsonb,
    priority integer DEFAULT 0 NOT NULL,
    poisoned_at timestamp with time zone,
    reconcile_attempts integer DEFAULT 0 NOT NULL,
    reconcile_next_at timestamp with time zone,
    parent_run_id bigint,
    parent_node text,
    depth integer DEFAULT 0 NOT NULL,
    tenant text DEFAULT 'default'::text NOT NULL,
    trace_context jsonb,
    CONSTRAINT workflow_runs_depth_check CHECK ((depth >= 0)),
    CONSTRAINT workflow_runs_parent_pair CHECK (((parent_run_id IS NULL) = (parent_node IS NULL))),
    CONSTRAINT workflow_runs_status_check CHECK ((status = ANY (ARRAY['queued'::text, 'running'::text, 'awaiting_input'::text, 'completed'::text, 'failed'::text, 'cancelled'::text]))),
    CONSTRAINT workflow_runs_tenant_check CHECK ((tenant <> ''::text))
);

CREATE SEQUENCE public.workflow_runs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.workflow_runs_id_seq OWNED BY public.workflow_runs.id;

ALTER TABLE ONLY public.ingest_jobs_history ATTACH PARTITION public.ingest_jobs_history_default DEFAULT;

ALTER TABLE ONLY public.workflow_node_jobs_history ATTACH PARTITION public.workflow_node_jobs_history_default DEFAULT;

ALTER TABLE ONLY public.ingest_jobs ALTER COLUMN id SET DEFAULT nextval('public.ingest_jobs_id_seq'::regclass);

ALTER TABLE ONLY public.job_events ALTER COLUMN id SET DEFAULT nextval('public.job_events_id_seq'::regclass);

ALTER TABLE ONLY public.qw_worker_exits ALTER COLUMN id SET DEFAULT nextval('public.qw_worker_exits_id_seq'::regclass);

ALTER TABLE ONLY public.workflow_dispatch_events ALTER COLUMN id SET DEFAULT nextval('public.workflow_dispatch_events_id_seq'::regclass);

ALTER TABLE ONLY public.workflow_events ALTER COLUMN id SET DEFAULT nextval('public.workflow_events_id_seq'::regclass);

ALTER TABLE ONLY public.workflow_input_submissions ALTER COLUMN id SET DEFAULT nextval('public.workflow_input_submissions_id_seq'::regclass);

ALTER TABLE ONLY public.workflow_node_jobs ALTER COLUMN id SET DEFAULT nextval('public.workflow_node_jobs_id_seq'::regclass);

ALTER TABLE ONLY public.workflow_run_actions ALTER COLUMN id SET DEFAULT nextval('public.workflow_run_actions_id_seq'::regclass);

ALTER TABLE ONLY public.workflow_runs ALTER COLUMN id SET DEFAULT nextval('public.workflow_runs_id_seq'::regclass);

ALTER TABLE ONLY public.flow_keys
    ADD CONSTRAINT flow_keys_pkey PRIMARY KEY (queue, scope, key);

ALTER TABLE ONLY public.flow_limits
    ADD CONSTRAINT flow_limits_pkey PRIMARY KEY (queue, task);

ALTER TABLE ONLY public.gpu_claim_turns
    ADD CONSTRAINT gpu_claim_turns_pkey PRIMARY KEY (queue);

ALTER TABLE ONLY public.gpu_models
    ADD CONSTRAINT gpu_models_pkey PRIMARY KEY (model_id);

ALTER TABLE ONLY public.gpu_task_vram
    ADD CONSTRAINT gpu_task_vram_pkey PRIMARY KEY (model_id, task);

ALTER TABLE ONLY public.host_metrics
    ADD CONSTRAINT host_metrics_pkey PRIMARY KEY (host_label);

ALTER TABLE ONLY public.ingest_jobs
    ADD CONSTRAINT ingest_jobs_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.job_events
    ADD CONSTRAINT job_events_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.queue_schema_version
    ADD CONSTRAINT queue_schema_version_pkey PRIMARY KEY (version);

ALTER TABLE ONLY public.qw_leadership
    ADD CONSTRAINT qw_leadership_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.qw_orchestrators
    ADD CONSTRAINT qw_orchestrators_pkey PRIMARY KEY (orchestrator_id);

ALTER TABLE ONLY public.qw_wake_every_enqueue
    ADD CONSTRAINT qw_wake_every_enqueue_pkey PRIMARY KEY (queue);

ALTER TABLE ONLY public.qw_worker_exits
    ADD CONSTRAINT qw_worker_exits_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.schedule_entry_turns
    ADD CONSTRAINT schedule_entry_turns_pkey PRIMARY KEY (entry_name);

ALTER TABLE ONLY public.schedule_slots
    ADD CONSTRAINT schedule_slots_pkey PRIMARY KEY (entry_name, slot_time);

ALTER TABLE ONLY public.tenant_shares
    ADD CONSTRAINT tenant_shares_pkey PRIMARY KEY (queue, tenant);

ALTER TABLE ONLY public.tenant_weights
    ADD CONSTRAINT tenant_weights_pkey PRIMARY KEY (tenant);

ALTER TABLE ONLY public.worker_controls
    ADD CONSTRAINT worker_controls_pkey PRIMARY KEY (host_label, queue);

ALTER TABLE ONLY public.worker_heartbeats
    ADD CONSTRAINT worker_heartbeats_pkey PRIMARY KEY (worker_id);

ALTER TABLE ONLY public.workflow_dispatch_events
    ADD CONSTRAINT workflow_dispatch_events_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.workflow_events
    ADD CONSTRAINT workflow_events_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.workflow_input_submissions
    ADD CONSTRAINT workflow_input_submissions_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.workflow_node_jobs
    ADD CONSTRAINT workflow_node_jobs_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.workflow_node_jobs
    ADD CONSTRAINT workflow_node_jobs_run_node_key UNIQUE (run_id, node_name);

ALTER TABLE ONLY public.workflow_run_actions
    ADD CONSTRAINT workflow_run_actions_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.workflow_runs
    ADD CONSTRAINT workflow_runs_pkey PRIMARY KEY (id);

CREATE INDEX ingest_jobs_claim_idx ON public.ingest_jobs USING btree (queue, tenant, priority, id) WHERE (status = 'queued'::text);

CREATE UNIQUE INDEX ingest_jobs_dedup_live_idx ON public.ingest_jobs USING btree (dedup_key) WHERE ((dedup_key IS NOT NULL) AND (status = ANY (ARRAY['scheduled'::text, 'queued'::text, 'running'::text])));

CREATE INDEX ingest_jobs_dedup_recent_idx ON public.ingest_jobs USING btree (dedup_key, finished_at) WHERE (dedup_key IS NOT NULL);

CREATE INDEX ingest_jobs_finished_idx ON public.ingest_jobs USING btree (finished_at) WHERE (status = ANY (ARRAY['completed'::text, 'failed'::text, 'cancelled'::text]));

CREATE INDEX ingest_jobs_flow_running_idx ON public.ingest_jobs USING btree (queue, flow_scope, flow_key) WHERE ((status = 'running'::text) AND (flow_scope IS NOT NULL));

CREATE INDEX ingest_jobs_history_dedup_idx ON ONLY public.ingest_jobs_history USING btree (dedup_key, finished_at) WHERE (dedup_key IS NOT NULL);

CREATE INDEX ingest_jobs_history_default_dedup_key_finished_at_idx ON public.ingest_jobs_history_default USING btree (dedup_key, finished_at) WHERE (dedup_key IS NOT NULL);

CREATE INDEX ingest_jobs_history_finished_idx ON ONLY public.ingest_jobs_history USING btree (finished_at);

CREATE INDEX ingest_jobs_history_default_finished_at_idx ON public.ingest_jobs_history_default USING btree (finished_at);

CREATE INDEX ingest_jobs_history_id_idx ON ONLY public.ingest_jobs_history USING btree (id);

CREATE INDEX ingest_jobs_history_default_id_idx ON public.ingest_jobs_history_default USING btree (id);

CREATE INDEX ingest_jobs_running_idx ON public.ingest_jobs USING btree (lease_expires_at) WHERE (status = 'running'::text);

CREATE INDEX ingest_jobs_scheduled_idx ON public.ingest_jobs USING btree (run_after) WHERE (status = 'scheduled'::text);

CREATE INDEX job_events_at_idx ON public.job_events USING btree (at);

CREATE INDEX job_events_job_idx ON public.job_events USING btree (job_table, job_id, id);

CREATE INDEX qw_worker_exits_at_idx ON public.qw_worker_exits USING btree (at);

CREATE INDEX tenant_shares_active_idx ON public.tenant_shares USING btree (queue) WHERE active;

CREATE INDEX workflow_dispatch_events_pending_idx ON public.workflow_dispatch_events USING btree (next_attempt_at, id) WHERE ((processed_at IS NULL) AND (poisoned_at IS NULL));

CREATE INDEX workflow_dispatch_events_processed_idx ON public.workflow_dispatch_events USING btree (processed_at) WHERE (processed_at IS NOT NULL);

CREATE INDEX workflow_dispatch_events_run_idx ON public.workflow_dispatch_events USING btree (run_id);

CREATE INDEX workflow_events_kept_idx ON public.workflow_events USING btree (event_key, id) WHERE (status = 'kept'::text);

CREATE INDEX workflow_events_run_idx ON public.workflow_events USING btree (run_id);

CREATE INDEX workflow_input_submissions_open_idx ON public.workflow_input_submissions USING btree (status, id) WHERE (status = ANY (ARRAY['pending'::text, 'processing'::text]));

CREATE INDEX workflow_input_submissions_run_idx ON public.workflow_input_submissions USING btree (run_id, node_name);

CREATE INDEX workflow_node_jobs_claim_idx ON public.workflow_node_jobs USING btree (queue, tenant, priority, id) WHERE (status = 'queued'::text);

CREATE INDEX workflow_node_jobs_event_key_idx ON public.workflow_node_jobs USING btree (event_key) WHERE (event_key IS NOT NULL);

CREATE INDEX workflow_node_jobs_finished_idx ON public.workflow_node_jobs USING btree (finished_at) WHERE ((run_id IS NULL) AND (status = ANY (ARRAY['completed'::text, 'failed'::text, 'cancelled'::text])));

CREATE INDEX workflow_node_jobs_flow_running_idx ON public.workflow_node_jobs USING btree (queue, flow_scope, flow_key) WHERE ((status = 'running'::text) AND (flow_scope IS NOT NULL));

CREATE INDEX workflow_node_jobs_gang_idx ON public.workflow_node_jobs USING btree (queue, run_after) WHERE ((status = 'queued'::text) AND (gpus > 1));

CREATE INDEX workflow_node_jobs_gpu_devices_idx ON public.workflow_node_jobs USING gin (gpu_devices) WHERE ((status = 'running'::text) AND (gpu_devices IS NOT NULL));

CREATE INDEX workflow_node_jobs_history_vram_idx ON ONLY public.workflow_node_jobs_history USING btree (required_model, public.qw_gpu_task(node_module, node_name), finished_at DESC) WHERE ((status = 'completed'::text) AND (peak_vram_bytes IS NOT NULL));

CREATE INDEX workflow_node_jobs_history_de_required_model_qw_gpu_task_fi_idx ON public.workflow_node_jobs_history_default USING btree (required_model, public.qw_gpu_task(node_module, node_name), finished_at DESC) WHERE ((status = 'completed'::text) AND (peak_vram_bytes IS NOT NULL));

CREATE INDEX workflow_node_jobs_history_model_loads_idx ON ONLY public.workflow_node_jobs_history USING btree (required_model, finished_at DESC) WHERE (NOT model_hit);

CREATE INDEX workflow_node_jobs_history_defa_required_model_finished_at_idx1 ON public.workflow_node_jobs_history_default USING btree (required_model, finished_at DESC) WHERE (NOT model_hit);

CREATE INDEX workflow_node_jobs_history_model_hits_idx ON ONLY public.workflow_node_jobs_history USING btree (required_model, finished_at DESC) WHERE model_hit;

CREATE INDEX workflow_node_jobs_history_defau_required_model_finished_at_idx ON public.workflow_node_jobs_history_default USING btree (required_model, finished_at DESC) WHERE model_hit;

CREATE INDEX workflow_node_jobs_history_finished_idx ON ONLY public.workflow_node_jobs_history USING btree (finished_at);

CREATE INDEX workflow_node_jobs_history_default_finished_at_idx ON public.workflow_node_jobs_history_default USING btree (finished_at);

CREATE INDEX workflow_node_jobs_history_id_idx ON ONLY public.workflow_node_jobs_history USING btree (id);

CREATE INDEX workflow_node_jobs_history_default_id_idx ON public.workflow_node_jobs_history_default USING btree (id);

CREATE INDEX workflow_node_jobs_history_run_idx ON ONLY public.workflow_node_jobs_history USING btree (run_id) WHERE (run_id IS NOT NULL);

CREATE INDEX workflow_node_jobs_history_default_run_id_idx ON public.workflow_node_jobs_history_default USING btree (run_id) WHERE (run_id IS NOT NULL);

CREATE INDEX workflow_node_jobs_map_items_idx ON public.workflow_node_jobs USING btree (run_id, map_node, map_index) WHERE (map_node IS NOT NULL);

CREATE INDEX workflow_node_jobs_map_open_idx ON public.workflow_node_jobs USING btree (run_id, map_node, status) WHERE ((map_node IS NOT NULL) AND (status <> 'completed'::text));

CREATE INDEX workflow_node_jobs_model_claim_idx ON public.workflow_node_jobs USING btree (queue, required_model, priority DESC, id) WHERE (status = 'queued'::text);

CREATE INDEX workflow_node_jobs_model_hits_idx ON public.workflow_node_jobs USING btree (required_model, finished_at DESC) WHERE model_hit;

CREATE INDEX workflow_node_jobs_model_loads_idx ON public.workflow_node_jobs USING btree (required_model, finished_at DESC) WHERE (NOT model_hit);

CREATE INDEX workflow_node_jobs_outcome_idx ON public.workflow_node_jobs USING btree (finished_at) WHERE (status = ANY (ARRAY['completed'::text, 'failed'::text, 'cancelled'::text]));

CREATE INDEX workflow_node_jobs_run_idx ON public.workflow_node_jobs USING btree (run_id);

CREATE INDEX workflow_node_jobs_running_idx ON public.workflow_node_jobs USING btree (lease_expires_at) WHERE (status = 'running'::text);

CREATE INDEX workflow_node_jobs_scheduled_idx ON public.workflow_node_jobs USING btree (run_after) WHERE (status = 'scheduled'::text);

CREATE INDEX workflow_node_jobs_vram_samples_idx ON public.workflow_node_jobs USING btree (required_model, public.qw_gpu_task(node_module, node_name), finished_at DESC) WHERE ((status = 'completed'::text) AND (peak_vram_bytes IS NOT NULL));

CREATE INDEX workflow_node_jobs_waiting_idx ON public.workflow_node_jobs USING btree (queue) WHERE (status = 'waiting'::text);

CREATE INDEX workflow_node_jobs_waiting_maps_idx ON public.workflow_node_jobs USING btree (run_id) WHERE ((status = 'waiting'::text) AND (map_total IS NOT NULL));

CREATE INDEX workflow_node_jobs_wake_idx ON public.workflow_node_jobs USING btree (wake_at) WHERE ((status = 'waiting'::text) AND (wake_at IS NOT NULL));

CREATE INDEX workflow_run_actions_run_idx ON public.workflow_run_actions USING btree (run_id, id);

CREATE INDEX workflow_runs_active_idx ON public.workflow_runs USING btree (status) WHERE (status = ANY (ARRAY['queued'::text, 'running'::text, 'awaiting_input'::text]));

CREATE INDEX workflow_runs_finished_idx ON public.workflow_runs USING btree (finished_at) WHERE (status = ANY (ARRAY['completed'::text, 'failed'::text, 'cancelled'::text]));

CREATE UNIQUE INDEX workflow_runs_parent_node_key ON public.workflow_runs USING btree (parent_run_id, parent_node) WHERE (parent_run_id IS NOT NULL);

ALTER INDEX public.ingest_jobs_history_dedup_idx ATTACH PARTITION public.ingest_jobs_history_default_dedup_key_finished_at_idx;

ALTER INDEX public.ingest_jobs_history_finished_idx ATTACH PARTITION public.ingest_jobs_history_default_finished_at_idx;

ALTER INDEX public.ingest_jobs_history_id_idx ATTACH PARTITION public.ingest_jobs_history_default_id_idx;

ALTER INDEX public.workflow_node_jobs_history_vram_idx ATTACH PARTITION public.workflow_node_jobs_history_de_required_model_qw_gpu_task_fi_idx;

ALTER INDEX public.workflow_node_jobs_history_model_loads_idx ATTACH PARTITION public.workflow_node_jobs_history_defa_required_model_finished_at_idx1;

ALTER INDEX public.workflow_node_jobs_history_model_hits_idx ATTACH PARTITION public.workflow_node_jobs_history_defau_required_model_finished_at_idx;

ALTER INDEX public.workflow_node_jobs_history_finished_idx ATTACH PARTITION public.workflow_node_jobs_history_default_finished_at_idx;

ALTER INDEX public.workflow_node_jobs_history_id_idx ATTACH PARTITION public.workflow_node_jobs_history_default_id_idx;

ALTER INDEX public.workflow_node_jobs_history_run_idx ATTACH PARTITION public.workflow_node_jobs_history_default_run_id_idx;

CREATE TRIGGER ingest_jobs_flow_admit BEFORE UPDATE OF status ON public.ingest_jobs FOR EACH ROW WHEN (((new.status = 'running'::text) AND (old.status <> 'running'::text) AND (new.flow_scope IS NOT NULL))) EXECUTE FUNCTION public.qw_flow_admit();

CREATE TRIGGER ingest_jobs_flow_freed AFTER UPDATE OF status ON public.ingest_jobs FOR EACH ROW WHEN (((old.status = 'running'::text) AND (new.status <> 'running'::text) AND (old.flow_scope IS NOT NULL))) EXECUTE FUNCTION public.qw_flow_freed();

CREATE TRIGGER ingest_jobs_ready_on_insert AFTER INSERT ON public.ingest_jobs FOR EACH ROW WHEN ((new.status = 'queued'::text)) EXECUTE FUNCTION public.qw_notify_job_ready('ingest_job_ready');

CREATE TRIGGER ingest_jobs_ready_on_requeue AFTER UPDATE OF status ON public.ingest_jobs FOR EACH ROW WHEN (((new.status = 'queued'::text) AND (old.status IS DISTINCT FROM 'queued'::text))) EXECUTE FUNCTION public.qw_notify_job_ready('ingest_job_ready');

CREATE TRIGGER ingest_jobs_record_event AFTER UPDATE OF status ON public.ingest_jobs FOR EACH ROW WHEN (((old.status IS DISTINCT FROM new.status) AND (NOT ((old.status = 'queued'::text) AND (new.status = 'running'::text))) AND (NOT ((old.status = 'running'::text) AND (new.status = 'completed'::text))) AND (NOT ((old.status = 'scheduled'::text) AND (new.status = 'queued'::text))))) EXECUTE FUNCTION public.qw_record_job_event();

CREATE CONSTRAINT TRIGGER ingest_jobs_requeue_bump AFTER UPDATE OF status ON public.ingest_jobs DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (((new.status = 'queued'::text) AND (old.status <> 'queued'::text))) EXECUTE FUNCTION public.qw_requeue_bump();

CREATE TRIGGER ingest_jobs_revoked AFTER UPDATE OF status, claimed_by ON public.ingest_jobs FOR EACH ROW WHEN (((old.status = 'running'::text) AND (old.claimed_by IS NOT NULL) AND (new.status <> 'completed'::text) AND ((new.status <> 'running'::text) OR (new.claimed_by IS DISTINCT FROM old.claimed_by)))) EXECUTE FUNCTION public.qw_notify_job_revoked();

CREATE TRIGGER ingest_jobs_schedule_future BEFORE INSERT ON public.ingest_jobs FOR EACH ROW WHEN (((new.status = 'queued'::text) AND (new.run_after > now()))) EXECUTE FUNCTION public.qw_schedule_future_job();

CREATE TRIGGER ingest_jobs_tenant_requeued AFTER UPDATE OF status ON public.ingest_jobs FOR EACH ROW WHEN (((new.status = 'queued'::text) AND (old.status <> 'queued'::text))) EXECUTE FUNCTION public.qw_tenant_requeued();

CREATE TRIGGER ingest_jobs_tenants_inserted AFTER INSERT ON public.ingest_jobs REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.qw_tenants_inserted();

CREATE TRIGGER worker_controls_notify AFTER INSERT OR DELETE OR UPDATE ON public.worker_controls FOR EACH ROW EXECUTE FUNCTION public.qw_notify_worker_control();

CREATE TRIGGER workflow_events_deliver BEFORE INSERT ON public.workflow_events FOR EACH ROW EXECUTE FUNCTION public.qw_deliver_event();

CREATE TRIGGER workflow_events_notify AFTER INSERT ON public.workflow_events FOR EACH ROW WHEN ((new.status = 'kept'::text)) EXECUTE FUNCTION public.qw_notify_timer();

CREATE TRIGGER workflow_input_submissions_notify AFTER INSERT ON public.workflow_input_submissions FOR EACH ROW EXECUTE FUNCTION public.qw_notify_input_submission();

CREATE TRIGGER workflow_node_jobs_cancelled_run_guard_ins BEFORE INSERT ON public.workflow_node_jobs FOR EACH ROW WHEN (((new.run_id IS NOT NULL) AND (new.status = ANY (ARRAY['scheduled'::text, 'queued'::text, 'awaiting_input'::text])))) EXECUTE FUNCTION public.qw_cancelled_run_guard();

CREATE TRIGGER workflow_node_jobs_cancelled_run_guard_upd BEFORE UPDATE OF status ON public.workflow_node_jobs FOR EACH ROW WHEN (((new.run_id IS NOT NULL) AND (new.status = ANY (ARRAY['scheduled'::text, 'queued'::text, 'awaiting_input'::text])) AND (old.status IS DISTINCT FROM new.status))) EXECUTE FUNCTION public.qw_cancelled_run_guard();

CREATE TRIGGER workflow_node_jobs_dispatch_event AFTER UPDATE OF status ON public.workflow_node_jobs FOR EACH ROW WHEN (((new.run_id IS NOT NULL) AND (new.status = ANY (ARRAY['completed'::text, 'failed'::text, 'cancelled'::text])) AND (old.status IS DISTINCT FROM new.status))) EXECUTE FUNCTION public.qw_record_dispatch_event();

CREATE TRIGGER workflow_node_jobs_flow_admit BEFORE UPDATE OF status ON public.workflow_node_jobs FOR EACH ROW WHEN (((new.status = 'running'::text) AND (old.status <> 'running'::text) AND (new.flow_scope IS NOT NULL))) EXECUTE FUNCTION public.qw_flow_admit();

CREATE TRIGGER workflow_node_jobs_flow_freed AFTER UPDATE OF status ON public.workflow_node_jobs FOR EACH ROW WHEN (((old.status = 'running'::text) AND (new.status <> 'running'::text) AND (old.flow_scope IS NOT NULL))) EXECUTE FUNCTION public.qw_flow_freed();

CREATE TRIGGER workflow_node_jobs_gpu_learn AFTER UPDATE OF status ON public.workflow_node_jobs FOR EACH ROW WHEN (((new.status = 'completed'::text) AND (old.status <> 'completed'::text) AND (new.required_model IS NOT NULL) AND (new.peak_vram_bytes IS NOT NULL))) EXECUTE FUNCTION public.qw_gpu_learn();

CREATE TRIGGER workflow_node_jobs_gpu_room_freed AFTER UPDATE OF status ON public.workflow_node_jobs FOR EACH ROW WHEN (((old.status = 'running'::text) AND (new.status <> 'running'::text) AND (old.gpu_devices IS NOT NULL))) EXECUTE FUNCTION public.qw_gpu_room_freed();

CREATE TRIGGER workflow_node_jobs_parent_node_ended AFTER UPDATE OF status ON public.workflow_node_jobs FOR EACH ROW WHEN (((new.run_id IS NOT NULL) AND (old.status = 'waiting'::text) AND (new.status = ANY (ARRAY['completed'::text, 'failed'::text, 'cancelled'::text, 'skipped'::text])))) EXECUTE FUNCTION public.qw_parent_node_ended();

CREATE TRIGGER workflow_node_jobs_ready_on_insert AFTER INSERT ON public.workflow_node_jobs FOR EACH ROW WHEN ((new.status = 'queued'::text)) EXECUTE FUNCTION public.qw_notify_job_ready('node_job_ready');

CREATE TRIGGER workflow_node_jobs_ready_on_requeue AFTER UPDATE OF status ON public.workflow_node_jobs FOR EACH ROW WHEN (((new.status = 'queued'::text) AND (old.status IS DISTINCT FROM 'queued'::text))) EXECUTE FUNCTION public.qw_notify_job_ready('node_job_ready');

CREATE TRIGGER workflow_node_jobs_record_event AFTER UPDATE OF status ON public.workflow_node_jobs FOR EACH ROW WHEN (((old.status IS DISTINCT FROM new.status) AND (NOT ((old.status = 'queued'::text) AND (new.status = 'running'::text))) AND (NOT ((old.status = 'running'::text) AND (new.status = 'completed'::text))) AND (NOT ((old.status = 'scheduled'::text) AND (new.status = 'queued'::text))))) EXECUTE FUNCTION public.qw_record_job_event();

CREATE TRIGGER workflow_node_jobs_record_marker AFTER INSERT ON public.workflow_node_jobs FOR EACH ROW WHEN ((new.status = ANY (ARRAY['skipped'::text, 'cancelled'::text]))) EXECUTE FUNCTION public.qw_record_job_event();

CREATE CONSTRAINT TRIGGER workflow_node_jobs_requeue_bump AFTER UPDATE OF status ON public.workflow_node_jobs DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (((new.status = 'queued'::text) AND (old.status <> 'queued'::text))) EXECUTE FUNCTION public.qw_requeue_bump();

CREATE TRIGGER workflow_node_jobs_revoked AFTER UPDATE OF status, claimed_by ON public.workflow_node_jobs FOR EACH ROW WHEN (((old.status = 'running'::text) AND (old.claimed_by IS NOT NULL) AND (new.status <> 'completed'::text) AND ((new.status <> 'running'::text) OR (new.claimed_by IS DISTINCT FROM old.claimed_by)))) EXECUTE FUNCTION public.qw_notify_job_revoked();

CREATE TRIGGER workflow_node_jobs_run_tenant BEFORE INSERT ON public.workflow_node_jobs FOR EACH ROW EXECUTE FUNCTION public.qw_node_run_tenant();

CREATE TRIGGER workflow_node_jobs_schedule_future BEFORE INSERT ON public.workflow_node_jobs FOR EACH ROW WHEN (((new.status = 'queued'::text) AND (new.run_after > now()))) EXECUTE FUNCTION public.qw_schedule_future_job();

CREATE TRIGGER workflow_node_jobs_tenant_requeued AFTER UPDATE OF status ON public.workflow_node_jobs FOR EACH ROW WHEN (((new.status = 'queued'::text) AND (old.status <> 'queued'::text))) EXECUTE FUNCTION public.qw_tenant_requeued();

CREATE TRIGGER workflow_node_jobs_tenants_inserted AFTER INSERT ON public.workflow_node_jobs REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.qw_tenants_inserted();

CREATE TRIGGER workflow_node_jobs_timer_notify_ins AFTER INSERT ON public.workflow_node_jobs FOR EACH ROW WHEN (((new.status = 'waiting'::text) AND ((new.wake_at IS NOT NULL) OR (new.event_key IS NOT NULL)))) EXECUTE FUNCTION public.qw_notify_timer();

CREATE TRIGGER workflow_node_jobs_timer_notify_upd AFTER UPDATE OF status, wake_at, event_key ON public.workflow_node_jobs FOR EACH ROW WHEN (((new.status = 'waiting'::text) AND ((new.wake_at IS NOT NULL) OR (new.event_key IS NOT NULL)) AND ((old.status IS DISTINCT FROM new.status) OR (old.wake_at IS DISTINCT FROM new.wake_at) OR (old.event_key IS DISTINCT FROM new.event_key)))) EXECUTE FUNCTION public.qw_notify_timer();

CREATE TRIGGER workflow_runs_child_ended AFTER UPDATE OF status ON public.workflow_runs FOR EACH ROW WHEN (((new.parent_run_id IS NOT NULL) AND (new.status = ANY (ARRAY['completed'::text, 'failed'::text, 'cancelled'::text])) AND (old.status IS DISTINCT FROM new.status))) EXECUTE FUNCTION public.qw_child_run_ended();

CREATE TRIGGER workflow_runs_parent_tenant BEFORE INSERT ON public.workflow_runs FOR EACH ROW EXECUTE FUNCTION public.qw_child_run_tenant();

ALTER TABLE ONLY public.workflow_dispatch_events
    ADD CONSTRAINT workflow_dispatch_events_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.workflow_runs(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.workflow_events
    ADD CONSTRAINT workflow_events_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.workflow_runs(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.workflow_input_submissions
    ADD CONSTRAINT workflow_input_submissions_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.workflow_runs(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.workflow_node_jobs
    ADD CONSTRAINT workflow_node_jobs_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.workflow_runs(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.workflow_run_actions
    ADD CONSTRAINT workflow_run_actions_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.workflow_runs(id) ON DELETE CASCADE;

ALTER TABLE ONLY public.workflow_runs
    ADD CONSTRAINT workflow_runs_parent_run_id_fkey FOREIGN KEY (parent_run_id) REFERENCES public.workflow_runs(id) ON DELETE CASCADE;

GRANT USAGE ON SCHEMA public TO qw_worker;
GRANT USAGE ON SCHEMA public TO qw_orchestrator;
GRANT USAGE ON SCHEMA public TO qw_scheduler;
GRANT USAGE ON SCHEMA public TO qw_dashboard;
GRANT USAGE ON SCHEMA public TO qw_metrics;

GRANT SELECT,INSERT,UPDATE ON TABLE public.ingest_jobs TO qw_worker;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.ingest_jobs TO qw_orchestrator;
GRANT SELECT,INSERT ON TABLE public.ingest_jobs TO qw_scheduler;
GRANT SELECT,INSERT,UPDATE ON TABLE public.ingest_jobs TO qw_dashboard;
GRANT SELECT ON TABLE public.ingest_jobs TO qw_metrics;

GRANT SELECT,INSERT,UPDATE ON TABLE public.workflow_node_jobs TO qw_worker;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.workflow_node_jobs TO qw_orchestrator;
GRANT SELECT ON TABLE public.workflow_node_jobs TO qw_scheduler;
GRANT SELECT,INSERT,UPDATE ON TABLE public.workflow_node_jobs TO qw_dashboard;
GRANT SELECT ON TABLE public.workflow_node_jobs TO qw_metrics;

REVOKE ALL ON FUNCTION public.qw_history_drop_before(p_before timestamp with time zone, p_batch integer) FROM PUBLIC;
GRANT ALL ON FUNCTION public.qw_history_drop_before(p_before timestamp with time zone, p_batch integer) TO qw_orchestrator;

REVOKE ALL ON FUNCTION public.qw_history_ensure_partitions(p_from date, p_to date) FROM PUBLIC;
GRANT ALL ON FUNCTION public.qw_history_ensure_partitions(p_from date, p_to date) TO qw_orchestrator;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.flow_keys TO qw_worker;
GRANT SELECT ON TABLE public.flow_keys TO qw_metrics;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.flow_keys TO qw_orchestrator;
GRANT SELECT ON TABLE public.flow_keys TO qw_dashboard;
GRANT SELECT ON TABLE public.flow_keys TO qw_scheduler;

GRANT SELECT ON TABLE public.flow_limits TO qw_worker;
GRANT SELECT ON TABLE public.flow_limits TO qw_metrics;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.flow_limits TO qw_orchestrator;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.flow_limits TO qw_dashboard;
GRANT SELECT ON TABLE public.flow_limits TO qw_scheduler;

GRANT SELECT,INSERT,UPDATE ON TABLE public.gpu_claim_turns TO qw_worker;
GRANT SELECT ON TABLE public.gpu_claim_turns TO qw_orchestrator;
GRANT SELECT ON TABLE public.gpu_claim_turns TO qw_scheduler;
GRANT SELECT ON TABLE public.gpu_claim_turns TO qw_dashboard;
GRANT SELECT ON TABLE public.gpu_claim_turns TO qw_metrics;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.gpu_models TO qw_worker;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.gpu_models TO qw_orchestrator;
GRANT SELECT ON TABLE public.gpu_models TO qw_scheduler;
GRANT SELECT ON TABLE public.gpu_models TO qw_dashboard;
GRANT SELECT ON TABLE public.gpu_models TO qw_metrics;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.gpu_task_vram TO qw_worker;
GRANT SELECT ON TABLE public.gpu_task_vram TO qw_metrics;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.gpu_task_vram TO qw_orchestrator;
GRANT SELECT ON TABLE public.gpu_task_vram TO qw_dashboard;
GRANT SELECT ON TABLE public.gpu_task_vram TO qw_scheduler;

GRANT SELECT ON TABLE public.host_metrics TO qw_worker;
GRANT SELECT ON TABLE public.host_metrics TO qw_orchestrator;
GRANT SELECT ON TABLE public.host_metrics TO qw_scheduler;
GRANT SELECT ON TABLE public.host_metrics TO qw_dashboard;
GRANT SELECT,INSERT,UPDATE ON TABLE public.host_metrics TO qw_metrics;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.ingest_jobs_history TO qw_worker;
GRANT SELECT ON TABLE public.ingest_jobs_history TO qw_metrics;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.ingest_jobs_history TO qw_orchestrator;
GRANT SELECT,INSERT,DELETE ON TABLE public.ingest_jobs_history TO qw_dashboard;
GRANT SELECT ON TABLE public.ingest_jobs_history TO qw_scheduler;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.ingest_jobs_all TO qw_worker;
GRANT SELECT ON TABLE public.ingest_jobs_all TO qw_metrics;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.ingest_jobs_all TO qw_orchestrator;
GRANT SELECT ON TABLE public.ingest_jobs_all TO qw_dashboard;
GRANT SELECT ON TABLE public.ingest_jobs_all TO qw_scheduler;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.ingest_jobs_history_default TO qw_worker;
GRANT SELECT ON TABLE public.ingest_jobs_history_default TO qw_metrics;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.ingest_jobs_history_default TO qw_orchestrator;
GRANT SELECT ON TABLE public.ingest_jobs_history_default TO qw_dashboard;
GRANT SELECT ON TABLE public.ingest_jobs_history_default TO qw_scheduler;

GRANT SELECT,USAGE ON SEQUENCE public.ingest_jobs_id_seq TO qw_worker;
GRANT USAGE ON SEQUENCE public.ingest_jobs_id_seq TO qw_orchestrator;
GRANT USAGE ON SEQUENCE public.ingest_jobs_id_seq TO qw_scheduler;
GRANT USAGE ON SEQUENCE public.ingest_jobs_id_seq TO qw_dashboard;

GRANT SELECT,INSERT,UPDATE ON TABLE public.job_events TO qw_worker;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.job_events TO qw_orchestrator;
GRANT SELECT,INSERT ON TABLE public.job_events TO qw_scheduler;
GRANT SELECT,INSERT ON TABLE public.job_events TO qw_dashboard;
GRANT SELECT ON TABLE public.job_events TO qw_metrics;

GRANT SELECT,USAGE ON SEQUENCE public.job_events_id_seq TO qw_worker;
GRANT USAGE ON SEQUENCE public.job_events_id_seq TO qw_orchestrator;
GRANT USAGE ON SEQUENCE public.job_events_id_seq TO qw_scheduler;
GRANT USAGE ON SEQUENCE public.job_events_id_seq TO qw_dashboard;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.workflow_node_jobs_history TO qw_worker;
GRANT SELECT ON TABLE public.workflow_node_jobs_history TO qw_metrics;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.workflow_node_jobs_history TO qw_orchestrator;
GRANT SELECT,INSERT,DELETE ON TABLE public.workflow_node_jobs_history TO qw_dashboard;
GRANT SELECT ON TABLE public.workflow_node_jobs_history TO qw_scheduler;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.workflow_node_jobs_all TO qw_worker;
GRANT SELECT ON TABLE public.workflow_node_jobs_all TO qw_metrics;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.workflow_node_jobs_all TO qw_orchestrator;
GRANT SELECT ON TABLE public.workflow_node_jobs_all TO qw_dashboard;
GRANT SELECT ON TABLE public.workflow_node_jobs_all TO qw_scheduler;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.node_events TO qw_worker;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.node_events TO qw_orchestrator;
GRANT SELECT ON TABLE public.node_events TO qw_scheduler;
GRANT SELECT ON TABLE public.node_events TO qw_dashboard;
GRANT SELECT ON TABLE public.node_events TO qw_metrics;

GRANT SELECT ON TABLE public.queue_schema_version TO qw_worker;
GRANT SELECT ON TABLE public.queue_schema_version TO qw_orchestrator;
GRANT SELECT ON TABLE public.queue_schema_version TO qw_scheduler;
GRANT SELECT ON TABLE public.queue_schema_version TO qw_dashboard;
GRANT SELECT ON TABLE public.queue_schema_version TO qw_metrics;

GRANT SELECT ON TABLE public.qw_leadership TO qw_worker;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.qw_leadership TO qw_orchestrator;
GRANT SELECT ON TABLE public.qw_leadership TO qw_scheduler;
GRANT SELECT ON TABLE public.qw_leadership TO qw_dashboard;
GRANT SELECT ON TABLE public.qw_leadership TO qw_metrics;

GRANT SELECT ON TABLE public.qw_orchestrators TO qw_worker;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.qw_orchestrators TO qw_orchestrator;
GRANT SELECT ON TABLE public.qw_orchestrators TO qw_scheduler;
GRANT SELECT ON TABLE public.qw_orchestrators TO qw_dashboard;
GRANT SELECT ON TABLE public.qw_orchestrators TO qw_metrics;

GRANT ALL ON SEQUENCE public.qw_requeue_seq TO qw_worker;
GRANT SELECT,USAGE ON SEQUENCE public.qw_requeue_seq TO qw_orchestrator;
GRANT SELECT,USAGE ON SEQUENCE public.qw_requeue_seq TO qw_dashboard;
GRANT SELECT,USAGE ON SEQUENCE public.qw_requeue_seq TO qw_scheduler;

GRANT SELECT,INSERT ON TABLE public.qw_wake_every_enqueue TO qw_worker;
GRANT SELECT ON TABLE public.qw_wake_every_enqueue TO qw_metrics;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.qw_wake_every_enqueue TO qw_orchestrator;
GRANT SELECT ON TABLE public.qw_wake_every_enqueue TO qw_dashboard;
GRANT SELECT ON TABLE public.qw_wake_every_enqueue TO qw_scheduler;
GRANT SELECT ON TABLE public.qw_wake_every_enqueue TO PUBLIC;

GRANT SELECT,INSERT ON TABLE public.qw_worker_exits TO qw_worker;
GRANT SELECT ON TABLE public.qw_worker_exits TO qw_metrics;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.qw_worker_exits TO qw_orchestrator;
GRANT SELECT ON TABLE public.qw_worker_exits TO qw_dashboard;
GRANT SELECT ON TABLE public.qw_worker_exits TO qw_scheduler;

GRANT ALL ON SEQUENCE public.qw_worker_exits_id_seq TO qw_worker;
GRANT USAGE ON SEQUENCE public.qw_worker_exits_id_seq TO qw_orchestrator;
GRANT USAGE ON SEQUENCE public.qw_worker_exits_id_seq TO qw_dashboard;
GRANT USAGE ON SEQUENCE public.qw_worker_exits_id_seq TO qw_scheduler;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.qw_worker_sessions TO qw_worker;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.qw_worker_sessions TO qw_orchestrator;
GRANT SELECT ON TABLE public.qw_worker_sessions TO qw_scheduler;
GRANT SELECT ON TABLE public.qw_worker_sessions TO qw_dashboard;
GRANT SELECT ON TABLE public.qw_worker_sessions TO qw_metrics;

GRANT SELECT ON TABLE public.schedule_entry_turns TO qw_worker;
GRANT SELECT ON TABLE public.schedule_entry_turns TO qw_orchestrator;
GRANT SELECT,INSERT,UPDATE ON TABLE public.schedule_entry_turns TO qw_scheduler;
GRANT SELECT ON TABLE public.schedule_entry_turns TO qw_dashboard;
GRANT SELECT ON TABLE public.schedule_entry_turns TO qw_metrics;

GRANT SELECT ON TABLE public.schedule_slots TO qw_worker;
GRANT SELECT ON TABLE public.schedule_slots TO qw_orchestrator;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.schedule_slots TO qw_scheduler;
GRANT SELECT ON TABLE public.schedule_slots TO qw_dashboard;
GRANT SELECT ON TABLE public.schedule_slots TO qw_metrics;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.tenant_shares TO qw_worker;
GRANT SELECT ON TABLE public.tenant_shares TO qw_metrics;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.tenant_shares TO qw_orchestrator;
GRANT SELECT,INSERT,UPDATE ON TABLE public.tenant_shares TO qw_dashboard;
GRANT SELECT,INSERT,UPDATE ON TABLE public.tenant_shares TO qw_scheduler;

GRANT SELECT ON TABLE public.tenant_weights TO qw_worker;
GRANT SELECT ON TABLE public.tenant_weights TO qw_metrics;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.tenant_weights TO qw_orchestrator;
GRANT SELECT ON TABLE public.tenant_weights TO qw_dashboard;
GRANT SELECT ON TABLE public.tenant_weights TO qw_scheduler;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.worker_controls TO qw_worker;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.worker_controls TO qw_orchestrator;
GRANT SELECT ON TABLE public.worker_controls TO qw_scheduler;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.worker_controls TO qw_dashboard;
GRANT SELECT ON TABLE public.worker_controls TO qw_metrics;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.worker_heartbeats TO qw_worker;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.worker_heartbeats TO qw_orchestrator;
GRANT SELECT ON TABLE public.worker_heartbeats TO qw_scheduler;
GRANT SELECT ON TABLE public.worker_heartbeats TO qw_dashboard;
GRANT SELECT ON TABLE public.worker_heartbeats TO qw_metrics;

GRANT SELECT,USAGE ON SEQUENCE public.worker_lock_key_seq TO qw_worker;
GRANT USAGE ON SEQUENCE public.worker_lock_key_seq TO qw_orchestrator;
GRANT USAGE ON SEQUENCE public.worker_lock_key_seq TO qw_scheduler;
GRANT USAGE ON SEQUENCE public.worker_lock_key_seq TO qw_dashboard;

GRANT SELECT,INSERT,UPDATE ON TABLE public.workflow_dispatch_events TO qw_worker;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.workflow_dispatch_events TO qw_orchestrator;
GRANT SELECT ON TABLE public.workflow_dispatch_events TO qw_scheduler;
GRANT SELECT,INSERT ON TABLE public.workflow_dispatch_events TO qw_dashboard;
GRANT SELECT ON TABLE public.workflow_dispatch_events TO qw_metrics;

GRANT SELECT,USAGE ON SEQUENCE public.workflow_dispatch_events_id_seq TO qw_worker;
GRANT USAGE ON SEQUENCE public.workflow_dispatch_events_id_seq TO qw_orchestrator;
GRANT USAGE ON SEQUENCE public.workflow_dispatch_events_id_seq TO qw_scheduler;
GRANT USAGE ON SEQUENCE public.workflow_dispatch_events_id_seq TO qw_dashboard;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.workflow_events TO qw_worker;
GRANT SELECT ON TABLE public.workflow_events TO qw_metrics;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.workflow_events TO qw_orchestrator;
GRANT SELECT ON TABLE public.workflow_events TO qw_dashboard;
GRANT SELECT ON TABLE public.workflow_events TO qw_scheduler;

GRANT ALL ON SEQUENCE public.workflow_events_id_seq TO qw_worker;
GRANT USAGE ON SEQUENCE public.workflow_events_id_seq TO qw_orchestrator;
GRANT USAGE ON SEQUENCE public.workflow_events_id_seq TO qw_dashboard;
GRANT USAGE ON SEQUENCE public.workflow_events_id_seq TO qw_scheduler;

GRANT SELECT,INSERT,UPDATE ON TABLE public.workflow_input_submissions TO qw_worker;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.workflow_input_submissions TO qw_orchestrator;
GRANT SELECT ON TABLE public.workflow_input_submissions TO qw_scheduler;
GRANT SELECT,INSERT,UPDATE ON TABLE public.workflow_input_submissions TO qw_dashboard;
GRANT SELECT ON TABLE public.workflow_input_submissions TO qw_metrics;

GRANT SELECT,USAGE ON SEQUENCE public.workflow_input_submissions_id_seq TO qw_worker;
GRANT USAGE ON SEQUENCE public.workflow_input_submissions_id_seq TO qw_orchestrator;
GRANT USAGE ON SEQUENCE public.workflow_input_submissions_id_seq TO qw_scheduler;
GRANT USAGE ON SEQUENCE public.workflow_input_submissions_id_seq TO qw_dashboard;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.workflow_node_jobs_history_default TO qw_worker;
GRANT SELECT ON TABLE public.workflow_node_jobs_history_default TO qw_metrics;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.workflow_node_jobs_history_default TO qw_orchestrator;
GRANT SELECT ON TABLE public.workflow_node_jobs_history_default TO qw_dashboard;
GRANT SELECT ON TABLE public.workflow_node_jobs_history_default TO qw_scheduler;

GRANT SELECT,USAGE ON SEQUENCE public.workflow_node_jobs_id_seq TO qw_worker;
GRANT USAGE ON SEQUENCE public.workflow_node_jobs_id_seq TO qw_orchestrator;
GRANT USAGE ON SEQUENCE public.workflow_node_jobs_id_seq TO qw_scheduler;
GRANT USAGE ON SEQUENCE public.workflow_node_jobs_id_seq TO qw_dashboard;

GRANT SELECT,INSERT,UPDATE ON TABLE public.workflow_run_actions TO qw_worker;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.workflow_run_actions TO qw_orchestrator;
GRANT SELECT ON TABLE public.workflow_run_actions TO qw_scheduler;
GRANT SELECT,INSERT ON TABLE public.workflow_run_actions TO qw_dashboard;
GRANT SELECT ON TABLE public.workflow_run_actions TO qw_metrics;

GRANT SELECT,USAGE ON SEQUENCE public.workflow_run_actions_id_seq TO qw_worker;
GRANT USAGE ON SEQUENCE public.workflow_run_actions_id_seq TO qw_orchestrator;
GRANT USAGE ON SEQUENCE public.workflow_run_actions_id_seq TO qw_scheduler;
GRANT USAGE ON SEQUENCE public.workflow_run_actions_id_seq TO qw_dashboard;

GRANT SELECT,INSERT,UPDATE ON TABLE public.workflow_runs TO qw_worker;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.workflow_runs TO qw_orchestrator;
GRANT SELECT ON TABLE public.workflow_runs TO qw_scheduler;
GRANT SELECT,INSERT,UPDATE ON TABLE public.workflow_runs TO qw_dashboard;
GRANT SELECT ON TABLE public.workflow_runs TO qw_metrics;

GRANT SELECT,USAGE ON SEQUENCE public.workflow_runs_id_seq TO qw_worker;
GRANT USAGE ON SEQUENCE public.workflow_runs_id_seq TO qw_orchestrator;
GRANT USAGE ON SEQUENCE public.workflow_runs_id_seq TO qw_scheduler;
GRANT USAGE ON SEQUENCE public.workflow_runs_id_seq TO qw_dashboard;

ALTER DEFAULT PRIVILEGES FOR ROLE postgres IN SCHEMA public GRANT ALL ON SEQUENCES TO qw_worker;
ALTER DEFAULT PRIVILEGES FOR ROLE postgres IN SCHEMA public GRANT USAGE ON SEQUENCES TO qw_orchestrator;
ALTER DEFAULT PRIVILEGES FOR ROLE postgres IN SCHEMA public GRANT USAGE ON SEQUENCES TO qw_dashboard;
ALTER DEFAULT PRIVILEGES FOR ROLE postgres IN SCHEMA public GRANT USAGE ON SEQUENCES TO qw_scheduler;

ALTER DEFAULT PRIVILEGES FOR ROLE postgres IN SCHEMA public GRANT SELECT,INSERT,DELETE,UPDATE ON TABLES TO qw_worker;
ALTER DEFAULT PRIVILEGES FOR ROLE postgres IN SCHEMA public GRANT SELECT ON TABLES TO qw_metrics;
ALTER DEFAULT PRIVILEGES FOR ROLE postgres IN SCHEMA public GRANT SELECT,INSERT,DELETE,UPDATE ON TABLES TO qw_orchestrator;
ALTER DEFAULT PRIVILEGES FOR ROLE postgres IN SCHEMA public GRANT SELECT ON TABLES TO qw_dashboard;
ALTER DEFAULT PRIVILEGES FOR ROLE postgres IN SCHEMA public GRANT SELECT ON TABLES TO qw_scheduler;
