CREATE OR REPLACE FUNCTION qw_tenants_activate(pairs text[][]) RETURNS void LANGUAGE sql AS $$
    INSERT INTO tenant_shares AS s (queue, tenant, vtime)
    SELECT n.queue, n.tenant, coalesce(qw_tenant_floor(n.queue), 0)
      FROM (SELECT DISTINCT pairs[i][1] AS queue, pairs[i][2] AS tenant FROM generate_subscripts(pairs, 1) AS i) AS n
     WHERE NOT EXISTS (SELECT FROM tenant_shares AS x WHERE x.queue = n.queue AND x.tenant = n.tenant AND x.active)
     ORDER BY n.queue, n.tenant  -- rows locked in one order: concurrent enqueues cannot deadlock
    ON CONFLICT (queue, tenant) DO UPDATE SET active = true, vtime = greatest(s.vtime, EXCLUDED.vtime), updated_at = now()
     WHERE NOT s.active;
$$;
