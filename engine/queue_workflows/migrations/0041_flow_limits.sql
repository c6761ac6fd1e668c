-- Concurrency keys and rate limits (docs/flow_control.md), enforced where a job becomes running.
-- A limit belongs to a queue (task '*') or to one task of it (an ingest task_name, a node's
-- node_name); the more specific one wins. Each key of its scope gets `max_running` slots and,
-- with a rate, a token bucket of `rate_count` tokens refilled over `rate_seconds`.
CREATE TABLE flow_limits (
    queue        text NOT NULL CHECK (queue ~ '^[A-Za-z_][A-Za-z0-9_.:-]{0,127}$'),
    task         text NOT NULL DEFAULT '*' CHECK (task = '*' OR task ~ '^[A-Za-z_][A-Za-z0-9_.:-]{0,127}$'),
    key_path     text CHECK (key_path ~ '^args(\.[A-Za-z0-9_-]{1,64}){1,8}$'),
    max_running  integer CHECK (max_running >= 0),
    rate_count   integer CHECK (rate_count >= 1),
    rate_seconds double precision CHECK (rate_seconds > 0 AND rate_seconds <= 86400),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, task),
    CONSTRAINT flow_limits_rate_whole CHECK ((rate_count IS NULL) = (rate_seconds IS NULL)),
    CONSTRAINT flow_limits_some_limit CHECK (max_running IS NOT NULL OR rate_count IS NOT NULL)
);

-- One row per key in use: locked while a claim admits a job of the key (the per-key turn; a
-- row lock, so a role that may not update it cannot hold it), and the key's token bucket.
CREATE TABLE flow_keys (
    queue       text NOT NULL,
    scope       text NOT NULL,
    key         text NOT NULL,
    tokens      double precision,
    refilled_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, scope, key)
);

-- concurrency_key: the caller's; flow_scope and flow_key: the limit and key a running job was
-- admitted under, stamped at its claim, so every way out of 'running' frees its slot by itself.
ALTER TABLE ingest_jobs ADD COLUMN concurrency_key text CHECK (length(concurrency_key) <= 200),
                        ADD COLUMN flow_scope text, ADD COLUMN flow_key text;
ALTER TABLE workflow_node_jobs ADD COLUMN concurrency_key text CHECK (length(concurrency_key) <= 200),
                               ADD COLUMN flow_scope text, ADD COLUMN flow_key text;
CREATE INDEX ingest_jobs_flow_running_idx ON ingest_jobs (queue, flow_scope, flow_key)
    WHERE status = 'running' AND flow_scope IS NOT NULL;
CREATE INDEX workflow_node_jobs_flow_running_idx ON workflow_node_jobs (queue, flow_scope, flow_key)
    WHERE status = 'running' AND flow_scope IS NOT NULL;

-- The limit that governs a job of `task` on `queue`: its task's own, else its queue's.
CREATE FUNCTION qw_flow_scope(p_queue text, p_task text) RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT l.task FROM flow_limits AS l
             WHERE l.queue = p_queue AND l.task IN (p_task, '*')
             ORDER BY l.task = '*' LIMIT 1);
END $$;

-- A job's key under a limit: its own concurrency_key, else its args at the limit's key_path, else ''.
CREATE FUNCTION qw_flow_key_of(p_key text, p_payload jsonb, p_path text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(p_key, p_payload #>> string_to_array(substr(p_path, 6), '.'), '')
$$;

-- The claim's filter (worker.sql, batch.sql), so it skips to admissible rows: the arrays below
-- are InitPlans, computed once per claim, and the per-row test is an inlined expression on the
-- row, no lookup. A row's tag is its scope (its task when the task has a limit of its own, else
-- '*'), chr(31), its key; a scope held at max_running 0 is listed as scope, chr(29). It reads
-- a keyless job's key at one key path per queue (the queue limit's, else a task's); the trigger
-- qw_flow_admit decides for good, under the key's lock, with each limit's own path.
-- PL/pgSQL, not SQL: a session keeps their plans, where a SQL function called once per claim
-- would be planned again at every claim.
CREATE FUNCTION qw_flow_path(p_queue text) RETURNS text[]
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT string_to_array(substr(l.key_path, 6), '.') FROM flow_limits AS l
             WHERE l.queue = p_queue AND l.key_path IS NOT NULL
             ORDER BY l.task = '*' DESC, l.task LIMIT 1);
END $$;

CREATE FUNCTION qw_flow_tasks(p_queue text) RETURNS text[]
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT coalesce(array_agg(l.task), '{}') FROM flow_limits AS l WHERE l.queue = p_queue AND l.task <> '*');
END $$;

-- The tags that admit nothing now: max_running reached, or no token left.
CREATE FUNCTION qw_flow_blocked(p_queue text) RETURNS text[]
LANGUAGE plpgsql STABLE AS $$
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

-- A queued row's scope and key, as the filter sees them (inlined: plain expressions on the row).
CREATE FUNCTION qw_flow_tag(j ingest_jobs, p_path text[], p_tasks text[]) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN j.task_name = ANY(p_tasks) THEN j.task_name ELSE '*' END || chr(31) || coalesce(j.concurrency_key, j.args #>> p_path, '')
$$;
CREATE FUNCTION qw_flow_tag(j workflow_node_jobs, p_path text[], p_tasks text[]) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN j.node_name = ANY(p_tasks) THEN j.node_name ELSE '*' END || chr(31) || coalesce(j.concurrency_key, j.inputs #>> p_path, '')
$$;
CREATE FUNCTION qw_flow_held(j ingest_jobs, p_tasks text[]) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT CASE WHEN j.task_name = ANY(p_tasks) THEN j.task_name ELSE '*' END || chr(29) $$;
CREATE FUNCTION qw_flow_held(j workflow_node_jobs, p_tasks text[]) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT CASE WHEN j.node_name = ANY(p_tasks) THEN j.node_name ELSE '*' END || chr(29) $$;
CREATE FUNCTION qw_flow_scope(j ingest_jobs) RETURNS text
LANGUAGE sql STABLE AS $$ SELECT qw_flow_scope(j.queue, j.task_name) $$;
CREATE FUNCTION qw_flow_scope(j workflow_node_jobs) RETURNS text
LANGUAGE sql STABLE AS $$ SELECT qw_flow_scope(j.queue, j.node_name) $$;

-- A job becoming running under a limit (the claim stamped flow_scope): admitted only if its key
-- has a free slot and, when rate limited, a token; otherwise the row is left untouched (queued,
-- no attempt charged). The key's flow_keys row is locked first, so admissions of one key take
-- turns across every worker and host, and the running count below sees every earlier admission.
-- Queues and queues' tables share the count, so a key spans ingest jobs and node jobs alike.
-- A batch claim (qw.flow_skip_locked) skips a key another claim holds instead of waiting: it
-- takes several keys in one statement, and waiting there could deadlock.
CREATE FUNCTION qw_flow_admit() RETURNS trigger
LANGUAGE plpgsql AS $$
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

CREATE TRIGGER ingest_jobs_flow_admit BEFORE UPDATE OF status ON ingest_jobs FOR EACH ROW
    WHEN (NEW.status = 'running' AND OLD.status <> 'running' AND NEW.flow_scope IS NOT NULL)
    EXECUTE FUNCTION qw_flow_admit();
CREATE TRIGGER workflow_node_jobs_flow_admit BEFORE UPDATE OF status ON workflow_node_jobs FOR EACH ROW
    WHEN (NEW.status = 'running' AND OLD.status <> 'running' AND NEW.flow_scope IS NOT NULL)
    EXECUTE FUNCTION qw_flow_admit();

-- A slot freed in a full key wakes the queue's idle worker (docs/throughput.md): jobs of a full
-- key wait for a NOTIFY, not for the safety poll. Only a key that was full notifies, so the
-- common case (keys below their limit) adds no NOTIFY, which would serialise commits.
CREATE FUNCTION qw_flow_freed() RETURNS trigger
LANGUAGE plpgsql AS $$
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

CREATE TRIGGER ingest_jobs_flow_freed AFTER UPDATE OF status ON ingest_jobs FOR EACH ROW
    WHEN (OLD.status = 'running' AND NEW.status <> 'running' AND OLD.flow_scope IS NOT NULL)
    EXECUTE FUNCTION qw_flow_freed();
CREATE TRIGGER workflow_node_jobs_flow_freed AFTER UPDATE OF status ON workflow_node_jobs FOR EACH ROW
    WHEN (OLD.status = 'running' AND NEW.status <> 'running' AND OLD.flow_scope IS NOT NULL)
    EXECUTE FUNCTION qw_flow_freed();

-- Workers admit jobs (flow_keys, by 0018's default privileges) but do not set limits;
-- operators and the dashboard do. 0033's default privileges let the orchestrator write, every role read.
REVOKE INSERT, UPDATE, DELETE ON flow_limits FROM qw_worker;
GRANT INSERT, UPDATE, DELETE ON flow_limits TO qw_dashboard;
