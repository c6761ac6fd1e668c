-- Named queries of gpu routing (docs/gpu.md): the claim plan's fragments, model rows, unassignable jobs.
-- `{table}` and `{head_order}` are fixed identifiers and fragments from queue_workflows.queries.

-- name: serialize_gpu_claims
-- Taken before a routed gpu claim, in its transaction: the claim's plan then sees every earlier
-- claim committed (a model another worker has just started loading counts as held). The turn is
-- the queue's row of gpu_claim_turns (migration 0034), locked by the ON CONFLICT arm whose WHERE
-- writes nothing; only a role that may update that table can take it. The claim's generic plan is
-- index probes whatever the parameters; without this setting Postgres would plan the long
-- statement afresh on every claim, which costs more than running it.
WITH turn AS (
    INSERT INTO gpu_claim_turns AS t (queue) VALUES (%(queue)s)
    ON CONFLICT (queue) DO UPDATE SET queue = EXCLUDED.queue WHERE false
)
SELECT set_config('plan_cache_mode', 'force_generic_plan', true);

-- name: gpu_routing
-- A gpu worker's claim filter (docs/gpu.md, "Routing"): only the plan's candidates, the next job
-- of each model it holds or may load and of the jobs needing no model; ORDER BY picks among them.
-- Then admission by VRAM ("Several jobs per GPU"): a worker that names its devices claims only a
-- job that fits `gpus` of them at once (gpu_room), on devices no starving gang job holds for
-- itself (held_below); gpu_reserve repeats the test to pick them.
AND c.id = ANY(ARRAY(SELECT cd.id FROM candidates AS cd))
AND (cardinality(%(gpu_uuids)s::text[]) = 0
     OR (SELECT count(*) FROM gpu_room AS r, LATERAL (SELECT qw_gpu_job_need_gb(c.required_model, c.vram_gb) AS gb) AS need
          WHERE c.gpus >= r.held_below AND CASE WHEN need.gb IS NULL THEN r.unused
                     ELSE need.gb <= r.room AND (r.free_gb IS NULL OR need.gb <= r.free_gb) END) >= c.gpus)

-- name: gpu_reserve
-- The claimed row's reservation, in the claim's SET: the `gpus` devices it fits with the least
-- room left (best fit keeps room whole for a large job), reserving its need on each, or each
-- whole device when the need is unknown (such a job runs alone there). Both NULL for a worker
-- that names no device.
(gpu_devices, vram_reserved_gb) = (
    SELECT array_agg(pick.uuid ORDER BY pick.room, pick.uuid), max(pick.gb)
      FROM (SELECT r.uuid, r.room, coalesce(need.gb, r.total_gb) AS gb
              FROM gpu_room AS r, LATERAL (SELECT qw_gpu_job_need_gb(j.required_model, j.vram_gb) AS gb) AS need
             WHERE j.gpus >= r.held_below AND CASE WHEN need.gb IS NULL THEN r.unused
                        ELSE need.gb <= r.room AND (r.free_gb IS NULL OR need.gb <= r.free_gb) END
             ORDER BY r.room, r.uuid LIMIT j.gpus) AS pick),

-- name: gpu_claim_plan
-- The first CTEs of a gpu worker's claim (docs/gpu.md, "Routing"), before claim_job's own. `plan` is one row, computed
-- once per claim, naming the models this worker may load, best first (`ranked`), and those of
-- them no other live worker could fit, when there is another (`sole`). A model must fit this
-- worker's VRAM (its need, qw_gpu_need_gb: learned, else declared); one another live worker holds (warm, or running a job for it, which covers a
-- load under way) is left to it unless the queue is deep enough for another copy: once the
-- model's recent jobs say how long a job and a load take, when the holders (a busy one only once
-- its job ends) would start the last queued job later than a new copy is ready, and always at
-- least second_copy_backlog jobs per holder. A worker whose devices already host a copy leaves it to a
-- free worker on a device without one (docs/gpu.md, "Busy is not warm"). Ranked: models fewer
-- other workers can fit first, then models fewer others hold, then the model whose next job is oldest.
-- Every step is an index probe per model (workflow_node_jobs_model_claim_idx), never a read of the
-- backlog: each queued model's next job by a loose index scan, and a holder's queue counted
-- only as far as the rule needs.
queued_models AS (
     -- Each model's next job in claim order: ordered by the index's own columns, so only
     -- workflow_node_jobs_model_claim_idx can answer, one probe per model.
     (SELECT q.required_model AS model, q.id AS next_id FROM {table} AS q
       WHERE q.queue = %(queue)s AND q.status = 'queued' AND q.required_model IS NOT NULL
       ORDER BY q.required_model, {head_order} LIMIT 1)
     UNION ALL
     SELECT nx.model, nx.next_id
       FROM queued_models AS m,
            LATERAL (SELECT q.required_model AS model, q.id AS next_id FROM {table} AS q
                      WHERE q.queue = %(queue)s AND q.status = 'queued' AND q.required_model > m.model
                      ORDER BY q.required_model, {head_order} LIMIT 1) AS nx
 ), running_on AS MATERIALIZED (
     -- Who is busy now, with what, where and since when: the running rows, which the claims'
     -- turns keep current (a heartbeat's state lags a claim by up to a beat).
     SELECT r.claimed_by AS worker_id, r.required_model AS model, coalesce(r.gpu_devices, '{{}}') AS devices,
            extract(epoch FROM now() - coalesce(r.started_at, now())) AS elapsed
       FROM {table} AS r
      WHERE r.status = 'running' AND r.queue = %(queue)s
 ), others AS (
     SELECT h.worker_id, h.loaded_models, h.swapping, h.vram_free_gb,
            coalesce((SELECT sum(qw_gpu_need_gb(g.model_id)) FROM gpu_models g WHERE g.model_id = ANY(h.loaded_models)), 0) AS held_gb,
            EXISTS (SELECT FROM running_on ro WHERE ro.worker_id = h.worker_id) AS busy,
            (SELECT max(ro.elapsed) FROM running_on ro WHERE ro.worker_id = h.worker_id) AS elapsed,
            ARRAY(SELECT d->>'uuid' FROM jsonb_array_elements(coalesce(h.gpu_devices, '[]')) AS d
                  UNION SELECT u FROM running_on ro, unnest(ro.devices) AS u WHERE ro.worker_id = h.worker_id) AS devices
       FROM worker_heartbeats h
      WHERE h.queue = %(queue)s AND h.worker_id <> %(worker_id)s AND h.state IN ('idle', 'busy')
        AND h.lock_key IN (SELECT lock_key FROM qw_worker_sessions)
 ), holding AS MATERIALIZED (
     -- Each queued model's holders: warm there and not swapping, or running a job for it (which
     -- covers a load under way). A busy holder is running some job now, so it is not free to take
     -- the next one ("Busy is not warm").
     SELECT q.model, o.worker_id, o.busy, o.elapsed, o.devices
       FROM queued_models AS q JOIN others AS o
         ON (NOT o.swapping AND o.loaded_models @> ARRAY[q.model])
            OR EXISTS (SELECT FROM running_on ro WHERE ro.worker_id = o.worker_id AND ro.model = q.model)
 ), scored AS MATERIALIZED (
     SELECT q.model, q.next_id, qw_gpu_need_gb(q.model) AS need_gb,
            (SELECT count(*) FROM holding hd WHERE hd.model = q.model) AS holders,
            (SELECT array_agg(coalesce(hd.elapsed, 0)) FROM holding hd WHERE hd.model = q.model AND hd.busy) AS busy_elapsed,
            (SELECT count(*) FROM others o
              WHERE o.vram_free_gb IS NULL OR qw_gpu_need_gb(q.model) IS NULL OR qw_gpu_need_gb(q.model) <= o.vram_free_gb + o.held_gb) AS fitters,
            -- A copy is better on a device that has none (it adds that device's compute): this
            -- worker leaves a second copy alone while its devices already host one and another
            -- live worker, free now, whose devices host none, could fit it.
            (EXISTS (SELECT FROM holding hd WHERE hd.model = q.model AND hd.devices && %(gpu_uuids)s::text[])
             AND EXISTS (SELECT FROM others o
                          WHERE NOT o.busy AND cardinality(o.devices) > 0
                            AND (o.vram_free_gb IS NULL OR qw_gpu_need_gb(q.model) IS NULL OR qw_gpu_need_gb(q.model) <= o.vram_free_gb + o.held_gb)
                            AND NOT EXISTS (SELECT FROM holding hd WHERE hd.model = q.model AND (hd.worker_id = o.worker_id OR hd.devices && o.devices)))
            ) AS crowded,
            (SELECT avg(d.wall_seconds) FROM (
                 SELECT f.wall_seconds FROM {table_all} AS f  -- a model's recent jobs, moved to history or not
                  WHERE f.required_model = q.model AND f.model_hit AND f.finished_at IS NOT NULL
                  ORDER BY f.finished_at DESC LIMIT 20) AS d) AS job_seconds,
            (SELECT avg(d.model_load_seconds) FROM (
                 SELECT f.model_load_seconds FROM {table_all} AS f
                  WHERE f.required_model = q.model AND NOT f.model_hit AND f.finished_at IS NOT NULL
                  ORDER BY f.finished_at DESC LIMIT 5) AS d) AS load_seconds
       FROM queued_models AS q
 ), needs AS (
     -- busy_left: what the busy holders still have to run of their current jobs, from the
     -- model's recent job time (a holder is free once it ends). Timed, a copy is worth loading
     -- when the holders alone would start the queue's last job later than a new copy is ready:
     -- queued x job + busy_left > holders x (load + job) (an idle holder takes the next job at
     -- once, so one job per holder waits for nobody). Timed or not, second_copy_backlog queued
     -- jobs per holder is a floor: an operator who sets it high gets no second copies.
     SELECT s.*, s.holders * %(second_copy_backlog)s AS by_copies,
            coalesce(s.job_seconds > 0 AND s.load_seconds IS NOT NULL, false) AS timed,
            coalesce((SELECT sum(greatest(s.job_seconds - e, 0)) FROM unnest(s.busy_elapsed) AS e), 0) AS busy_left
       FROM scored AS s
      WHERE (%(vram_available_gb)s::float IS NULL OR coalesce(s.need_gb, 0) <= %(vram_available_gb)s::float)
 ), counted AS (
     SELECT nd.*,
            CASE WHEN nd.holders = 0 OR nd.crowded THEN NULL
                 ELSE (SELECT count(*) FROM (  -- the ORDER BY keeps this on the model's index too
                          SELECT 1 FROM {table} AS q
                           WHERE q.queue = %(queue)s AND q.status = 'queued' AND q.required_model = nd.model
                           ORDER BY q.required_model, {head_order}
                           LIMIT (CASE WHEN nd.timed
                                       THEN greatest(least(greatest(floor((nd.holders * (nd.load_seconds + nd.job_seconds) - nd.busy_left) / nd.job_seconds) + 1, 1), 1000000), nd.by_copies)
                                       ELSE nd.by_copies END)::bigint) AS z)
            END AS n
       FROM needs AS nd
 ), allowed AS (
     SELECT ct.* FROM counted AS ct
      WHERE ct.holders = 0
         OR (NOT ct.crowded
             AND ct.n >= ct.by_copies  -- the operator's floor, timed or not
             AND (NOT ct.timed OR ct.n * ct.job_seconds + ct.busy_left > ct.holders * (ct.load_seconds + ct.job_seconds)))
 ), plan AS MATERIALIZED (
     SELECT coalesce(array_agg(a.model ORDER BY a.fitters, a.holders, a.next_id), '{{}}') AS ranked,
            coalesce(array_agg(a.model) FILTER (WHERE a.fitters = 0 AND EXISTS (SELECT 1 FROM others)), '{{}}') AS sole
       FROM allowed AS a
 ), gang AS MATERIALIZED (
     -- The oldest multi-GPU job queued longer than QW_GPU_GANG_HOLD_SECONDS (docs/gpu.md, "Busy
     -- is not warm"): a stream of one-GPU jobs would never leave all its devices free at once, so
     -- the devices of the live workers that could run it take nothing smaller until it starts.
     -- It is a candidate whatever the plan says of its model. One probe: workflow_node_jobs_gang_idx.
     SELECT g.id, g.gpus, qw_gpu_job_need_gb(g.required_model, g.vram_gb) AS gb
       FROM {table} AS g
      WHERE g.queue = %(queue)s AND g.status = 'queued' AND g.gpus > 1
        AND g.run_after < now() - make_interval(secs => %(gang_hold_seconds)s::float8)
      ORDER BY g.run_after LIMIT 1
 ), candidates AS (
     SELECT s.next_id AS id FROM scored AS s, plan AS p
      WHERE s.model = ANY(%(loaded_models)s::text[]) OR s.model = ANY(p.ranked)
     UNION ALL
     SELECT g.id FROM gang AS g
     UNION ALL
     (SELECT q.id FROM {table} AS q
       WHERE q.queue = %(queue)s AND q.status = 'queued' AND q.required_model IS NULL
       ORDER BY q.required_model, {head_order} LIMIT 1)
 ), gpu_room AS MATERIALIZED (
     -- The worker's devices (docs/gpu.md, "Several jobs per GPU"): room is the total less the
     -- margin and the running rows' reservations there; free_gb is what NVML read as free (plus
     -- what this worker's own idle models would give back). The claims are serialized
     -- (serialize_gpu_claims), so this sum sees every earlier claim committed.
     SELECT d.uuid, d.total_gb, d.free_gb,
            d.total_gb - %(vram_margin_gb)s::float8
              - coalesce((SELECT sum(r.vram_reserved_gb) FROM {table} AS r WHERE r.status = 'running' AND r.gpu_devices @> ARRAY[d.uuid]), 0) AS room,
            NOT EXISTS (SELECT FROM {table} AS r WHERE r.status = 'running' AND r.gpu_devices @> ARRAY[d.uuid]) AS unused,
            -- A starving gang job holds the device (smaller jobs may not reserve on it) while it
            -- would fit there and this worker, or another live one naming the device, has enough devices for it.
            coalesce((SELECT g.gpus FROM gang AS g
                       WHERE coalesce(g.gb, 0) <= d.total_gb - %(vram_margin_gb)s::float8
                         AND (cardinality(%(gpu_uuids)s::text[]) >= g.gpus
                              OR EXISTS (SELECT FROM others AS o WHERE cardinality(o.devices) >= g.gpus AND o.devices @> ARRAY[d.uuid]))), 1) AS held_below
       FROM unnest(%(gpu_uuids)s::text[], %(gpu_total_gb)s::float8[], %(gpu_free_gb)s::float8[]) AS d(uuid, total_gb, free_gb)
 ),

-- name: upsert_gpu_model
INSERT INTO gpu_models (model_id, est_vram_gb) VALUES (%(model_id)s, %(est_vram_gb)s)
ON CONFLICT (model_id) DO UPDATE SET est_vram_gb = EXCLUDED.est_vram_gb, updated_at = now();

-- name: flag_unassignable
-- Queued gpu jobs that no live gpu worker could ever run get a reason; it goes when one that fits
-- appears (or a worker claims the job: the claim clears it). A job fits a worker that lists its
-- devices (worker_heartbeats.gpu_devices: GPUs, MIG instances, AMD partitions) when `gpus` of them
-- each have their total less the margin for its need (qw_gpu_job_need_gb), as its claim requires;
-- a worker that lists none (CPU fallback) is one device of its VRAM, without margin or gang, as
-- its claim admits. Nothing is decided while no live worker reports VRAM. The status is checked
-- again on the row updated, so a job claimed while this ran is not flagged after its claim cleared it.
WITH live AS (
    SELECT h.worker_id, h.vram_total_gb, CASE WHEN jsonb_typeof(h.gpu_devices) = 'array' THEN h.gpu_devices END AS devices
      FROM worker_heartbeats h
     WHERE h.queue = 'gpu' AND (h.vram_total_gb IS NOT NULL OR jsonb_typeof(h.gpu_devices) = 'array')
       AND h.lock_key IN (SELECT lock_key FROM qw_worker_sessions)
), sizes AS (
    SELECT l.worker_id, d.value->>'uuid' AS uuid, (d.value->>'total_gb')::float8 AS total_gb,
           (d.value->>'total_gb')::float8 - %(vram_margin_gb)s::float8 AS usable_gb
      FROM live AS l, jsonb_array_elements(l.devices) AS d
), largest AS (
    SELECT (SELECT max(l.vram_total_gb) FROM live AS l WHERE l.devices IS NULL) AS worker_gb,
           dv.uuid, dv.worker_id, dv.total_gb, dv.usable_gb,
           (SELECT max(c.n) FROM (SELECT count(*) AS n FROM sizes GROUP BY worker_id) AS c) AS most_devices,
           EXISTS (SELECT FROM live) AS any_live
      FROM (SELECT 1) AS one LEFT JOIN LATERAL (SELECT * FROM sizes AS s ORDER BY s.total_gb DESC, s.uuid LIMIT 1) AS dv ON true
), verdict AS (
    SELECT j.id,
           CASE WHEN NOT (EXISTS (SELECT FROM live AS l WHERE l.devices IS NULL AND NOT (m.gb > l.vram_total_gb))
                          OR EXISTS (SELECT FROM sizes AS s WHERE NOT (n.gb > s.usable_gb)
                                      GROUP BY s.worker_id HAVING count(*) >= j.gpus))
                THEN CASE
                    WHEN lg.uuid IS NULL
                    THEN format('model %%s needs about %%s GB of VRAM; the largest live gpu worker has %%s GB',
                                j.required_model, round(m.gb::numeric, 2)::float8, round(lg.worker_gb::numeric, 1))
                    WHEN n.gb > lg.usable_gb
                    THEN format('%%s needs about %%s GB of VRAM on a device; the largest live gpu device, %%s of %%s, has %%s GB (%%s GB after the %%s GB margin)',
                                coalesce('model ' || j.required_model, 'the job'), round(n.gb::numeric, 2)::float8, lg.uuid,
                                lg.worker_id, round(lg.total_gb::numeric, 1), round(lg.usable_gb::numeric, 1),
                                %(vram_margin_gb)s::float8)
                    ELSE format('%%s needs %%s devices with about %%s GB of VRAM each; no live gpu worker has that many (the most is %%s)',
                                coalesce('model ' || j.required_model, 'the job'), j.gpus, round(n.gb::numeric, 2)::float8, lg.most_devices)
                END
           END AS reason
      FROM workflow_node_jobs j
           CROSS JOIN LATERAL (SELECT qw_gpu_need_gb(j.required_model) AS gb) m
           CROSS JOIN LATERAL (SELECT qw_gpu_job_need_gb(j.required_model, j.vram_gb) AS gb) n
           CROSS JOIN largest lg
     WHERE j.queue = 'gpu' AND j.status = 'queued' AND lg.any_live
)
UPDATE workflow_node_jobs j SET unassignable_reason = v.reason
  FROM verdict v
 WHERE j.id = v.id AND j.status = 'queued' AND j.unassignable_reason IS DISTINCT FROM v.reason
RETURNING j.id, j.required_model, j.unassignable_reason;
