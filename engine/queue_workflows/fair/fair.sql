-- Named queries of weighted fair share across tenants (docs/flow_control.md, "Fair share").
-- `{table}` is bound only to a job table's fixed identifier; `{band_order}` is a fixed fragment
-- from queue_workflows.queries; values are parameters.

-- name: fair_order
-- The CTEs a claim starts with (after gpu_claim_plan's): `fair_tenants`, the tenants in the order a
-- claim tries them. First the queue's active tenants, least virtual time first, a tie to the less
-- served one (a newcomer, level with the least-served), read and sorted once per claim; the claim
-- stops at the first tenant that yields a row.
-- Then every tenant with a queued job (`queued_tenants`, a loose index scan over the claim index),
-- read only when no active tenant yields one, so a tenant the sweep has not marked active yet still
-- has its work done rather than left waiting.
queued_tenants AS (
     (SELECT b.tenant FROM {table} AS b
       WHERE b.queue = %(queue)s AND b.status = 'queued'
       ORDER BY b.tenant LIMIT 1)
     UNION ALL
     SELECT nx.tenant
       FROM queued_tenants AS p,
            LATERAL (SELECT b.tenant FROM {table} AS b
                      WHERE b.queue = %(queue)s AND b.status = 'queued' AND b.tenant > p.tenant
                      ORDER BY b.tenant LIMIT 1) AS nx
), fair_tenants AS (
     (SELECT s.tenant FROM tenant_shares AS s WHERE s.queue = %(queue)s AND s.active ORDER BY s.vtime, s.served, s.tenant)
     UNION ALL
     (SELECT qt.tenant FROM queued_tenants AS qt)
)

-- name: fair_bands
-- A LATERAL subquery of the claim: tenant `f.tenant`'s priority bands with queued work, in the
-- order the claim tries them: priority aged by one level per %(aging_seconds)s its band's oldest
-- job has waited. A probe per band on the claim index (queue, tenant, priority, id), never a read
-- of the backlog; a tenant with one band costs two probes. `floor`: where the claim starts in the
-- band. A band this session has a floor for (qw_claim_floors, migration 0052) is probed from it, so
-- the versions claimed before it, which a pinned horizon keeps in the index, are jumped, not walked;
-- with nothing above its floor it is probed whole. The walk between such bands probes only the gaps.
-- Only the claim index may serve a floor: as `id >=` alone the planner may take the primary key and
-- walk every row above the floor, of every queue. So the band's head is probed between two row
-- comparisons in that index's order (with equalities on its leading columns, the btree would start at
-- the band's head and walk the index up to the floor), and the claim probe adds one to its `id >=`.
WITH RECURSIVE known AS MATERIALIZED (
     SELECT k.priority, k.floor FROM qw_claim_floors({table_name}, %(queue)s, f.tenant) AS k
), bands AS (
     SELECT (-2147483649)::bigint AS pos, NULL::integer AS priority, NULL::timestamptz AS created_at, 0::bigint AS floor
     UNION ALL
     SELECT coalesce(g.priority, nk.priority)::bigint, coalesce(g.priority, kh.priority), coalesce(g.created_at, kh.created_at),
            coalesce(kh.floor, 0)
       FROM bands AS p
       LEFT JOIN LATERAL (SELECT kn.priority, kn.floor FROM known AS kn WHERE kn.priority > p.pos
                           ORDER BY kn.priority LIMIT 1) AS nk ON true
       LEFT JOIN LATERAL (SELECT b.priority, b.created_at FROM {table} AS b
                           WHERE b.queue = %(queue)s AND b.status = 'queued' AND b.tenant = f.tenant
                             AND b.priority > p.pos AND b.priority < coalesce(nk.priority, 2147483648::bigint)
                           ORDER BY b.priority, b.id LIMIT 1) AS g ON true
       LEFT JOIN LATERAL (SELECT x.priority, x.created_at, x.floor
                            FROM ((SELECT b.priority, b.created_at, nk.floor FROM {table} AS b
                                    WHERE b.status = 'queued' AND g.priority IS NULL
                                      AND (b.queue, b.tenant, b.priority, b.id) >= (%(queue)s, f.tenant, nk.priority, nk.floor)
                                      AND (b.queue, b.tenant, b.priority) <= (%(queue)s, f.tenant, nk.priority)
                                    ORDER BY b.queue, b.tenant, b.priority, b.id LIMIT 1)
                                  UNION ALL
                                  (SELECT b.priority, b.created_at, 0::bigint FROM {table} AS b
                                    WHERE b.queue = %(queue)s AND b.status = 'queued' AND b.tenant = f.tenant
                                      AND b.priority = nk.priority AND g.priority IS NULL
                                    ORDER BY b.id LIMIT 1)) AS x
                           LIMIT 1) AS kh ON true
      WHERE g.priority IS NOT NULL OR nk.priority IS NOT NULL
)
SELECT bd.priority, bd.floor FROM bands AS bd WHERE bd.priority IS NOT NULL ORDER BY {band_order}

-- name: fair_charge
-- The CTE a claim ends with: each claimed row's tenant is charged one job over its weight, only
-- while the queue has two active tenants or more (a lone tenant competes with no one). Concurrent
-- claims of one tenant add up: each adds to the stored time under the row's lock.
fair_charged AS (
    UPDATE tenant_shares AS s
       SET vtime = s.vtime + cl.n / coalesce((SELECT w.weight FROM tenant_weights AS w WHERE w.tenant = cl.tenant), 1),
           served = s.served + cl.n, updated_at = now()
      FROM (SELECT claimed.tenant, count(*) AS n FROM claimed GROUP BY claimed.tenant) AS cl
     WHERE s.queue = %(queue)s AND s.tenant = cl.tenant
       AND (SELECT count(*) FROM (SELECT FROM tenant_shares AS o WHERE o.queue = %(queue)s AND o.active LIMIT 2) AS z) = 2
)

-- name: tenants_settle
-- The tenant sweep (leader): a tenant with nothing queued leaves the claim's walk, and one marked
-- idle while a job of its was being queued (a transaction the last pass could not see) comes back
-- at the least active virtual time. One snapshot for both: they touch disjoint rows.
WITH idled AS (
    UPDATE tenant_shares AS s SET active = false, updated_at = now()
     WHERE s.active
       AND NOT EXISTS (SELECT FROM ingest_jobs AS j WHERE j.queue = s.queue AND j.tenant = s.tenant AND j.status = 'queued')
       AND NOT EXISTS (SELECT FROM workflow_node_jobs AS j WHERE j.queue = s.queue AND j.tenant = s.tenant AND j.status = 'queued')
    RETURNING s.queue
), revived AS (
    UPDATE tenant_shares AS s
       SET active = true, updated_at = now(),
           vtime = greatest(s.vtime, coalesce(qw_tenant_floor(s.queue), s.vtime))
     WHERE NOT s.active
       AND (EXISTS (SELECT FROM ingest_jobs AS j WHERE j.queue = s.queue AND j.tenant = s.tenant AND j.status = 'queued')
            OR EXISTS (SELECT FROM workflow_node_jobs AS j WHERE j.queue = s.queue AND j.tenant = s.tenant AND j.status = 'queued'))
    RETURNING s.queue
)
SELECT (SELECT count(*) FROM idled) AS idled, (SELECT count(*) FROM revived) AS revived;

-- name: set_tenant_weight
INSERT INTO tenant_weights (tenant, weight) VALUES (%(tenant)s, %(weight)s)
ON CONFLICT (tenant) DO UPDATE SET weight = EXCLUDED.weight, updated_at = now();

-- name: clear_tenant_weight
DELETE FROM tenant_weights WHERE tenant = %(tenant)s;

-- name: tenant_shares
-- What an operator sees per (queue, tenant): live counts from both job tables, the weight, and the
-- jobs served while contended with the share of its queue's they are (`served_share`), beside the
-- share its weight asks among the queue's tenants that have been contended (`weight_share`).
WITH live AS (
    SELECT queue, tenant, count(*) FILTER (WHERE status = 'queued') AS queued, count(*) FILTER (WHERE status = 'running') AS running
      FROM (SELECT queue, tenant, status FROM ingest_jobs WHERE status IN ('queued', 'running')
            UNION ALL
            SELECT queue, tenant, status FROM workflow_node_jobs WHERE status IN ('queued', 'running')) AS j
     GROUP BY queue, tenant
), keys AS (
    SELECT queue, tenant FROM live UNION SELECT queue, tenant FROM tenant_shares
), shown AS (
    SELECT k.queue, k.tenant, coalesce(l.queued, 0) AS queued, coalesce(l.running, 0) AS running,
           coalesce(w.weight, 1) AS weight, coalesce(s.served, 0) AS served, coalesce(s.vtime, 0) AS vtime
      FROM keys AS k
      LEFT JOIN live AS l ON l.queue = k.queue AND l.tenant = k.tenant
      LEFT JOIN tenant_shares AS s ON s.queue = k.queue AND s.tenant = k.tenant
      LEFT JOIN tenant_weights AS w ON w.tenant = k.tenant
     WHERE %(queue)s::text IS NULL OR k.queue = %(queue)s
)
SELECT sh.*,
       round((sh.served::numeric / nullif(sum(sh.served) OVER (PARTITION BY sh.queue), 0)), 4) AS served_share,
       round((sh.weight / nullif(sum(sh.weight) FILTER (WHERE sh.served > 0) OVER (PARTITION BY sh.queue), 0))::numeric, 4) AS weight_share
  FROM shown AS sh
 ORDER BY sh.queue, sh.tenant;
