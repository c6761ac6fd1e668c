-- Named queries of weighted fair share across tenants (docs/flow_control.md, "Fair share").
-- `{table}` is bound only to a job table's fixed identifier; `{band_order}` is a fixed fragment
-- from queue_workflows.queries; values are parameters.

-- name: fair_order
-- The CTEs a claim starts with (after gpu_claim_plan's): `fair_order`, the queue's (tenant,
-- priority) bands with ready work in the order a claim tries them: least virtual time first,
-- then, within a tenant, priority aged by one level per %(aging_seconds)s its band's oldest job
-- has waited. A probe per band on the claim index (queue, tenant, priority, id), never a
-- read of the backlog: each band's oldest job by a loose index scan.
bands AS (
     (SELECT b.tenant, b.priority, b.id, b.created_at FROM {table} AS b
       WHERE b.queue = %(queue)s AND b.status = 'queued'
       ORDER BY b.tenant, b.priority, b.id LIMIT 1)
     UNION ALL
     -- The next band in index order: one probe, a row comparison on the index's own columns.
     SELECT nx.tenant, nx.priority, nx.id, nx.created_at
       FROM bands AS p,
            LATERAL (SELECT b.tenant, b.priority, b.id, b.created_at FROM {table} AS b
                      WHERE b.queue = %(queue)s AND b.status = 'queued' AND (b.tenant, b.priority) > (p.tenant, p.priority)
                      ORDER BY b.tenant, b.priority, b.id LIMIT 1) AS nx
), fair_tenants AS MATERIALIZED (
     -- A tenant back from idle starts no further behind the furthest-ahead one than 16 of the
     -- largest charges (jobs over weight) of the queue's tenants: it banks at most that much credit
     -- while it had nothing queued. Concurrent claims spread busy tenants' times by a few charges,
     -- well within that bound, so a tenant backlogged all along is never pulled forward.
     SELECT t.tenant, t.weight, greatest(t.vtime, max(t.vtime) OVER () - 16 * max(t.charge) OVER ()) AS vstart,
            count(*) OVER () AS contenders
       FROM (SELECT bt.tenant, coalesce(s.vtime, 0) AS vtime, coalesce(w.weight, 1) AS weight,
                    greatest(coalesce(s.charge, 0), 1 / coalesce(w.weight, 1)) AS charge
               FROM (SELECT DISTINCT bands.tenant FROM bands) AS bt
               LEFT JOIN tenant_shares AS s ON s.queue = %(queue)s AND s.tenant = bt.tenant
               LEFT JOIN tenant_weights AS w ON w.tenant = bt.tenant) AS t
), fair_order AS MATERIALIZED (
     SELECT bd.tenant, bd.priority
       FROM bands AS bd JOIN fair_tenants AS ft ON ft.tenant = bd.tenant
      ORDER BY ft.vstart, bd.tenant, {band_order}, bd.id
)

-- name: fair_charge
-- The CTE a claim ends with: the claimed rows' tenants are charged their jobs over their weight,
-- only while another tenant of the queue also has ready work (a lone tenant competes with no one).
-- Concurrent claims of one tenant add up: each adds its own charge to the stored time.
fair_charged AS (
    INSERT INTO tenant_shares AS s (queue, tenant, vtime, charge, served)
    SELECT %(queue)s, ft.tenant, ft.vstart + cl.n / ft.weight, cl.n / ft.weight, cl.n
      FROM (SELECT claimed.tenant, count(*) AS n FROM claimed GROUP BY claimed.tenant) AS cl
      JOIN fair_tenants AS ft ON ft.tenant = cl.tenant
     WHERE ft.contenders > 1
    ON CONFLICT (queue, tenant) DO UPDATE
       SET vtime = greatest(s.vtime, EXCLUDED.vtime - EXCLUDED.charge) + EXCLUDED.charge,
           charge = EXCLUDED.charge, served = s.served + EXCLUDED.served, updated_at = now()
)

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
