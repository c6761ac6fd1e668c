-- Weighted fair share across tenants (docs/flow_control.md, "Fair share"): every job carries a
-- tenant; a claim serves, within a queue, the active tenant with the least virtual time (jobs served
-- over its weight) that has ready work, walking active tenants in virtual-time order.
ALTER TABLE workflow_runs ADD COLUMN tenant text NOT NULL DEFAULT 'default' CHECK (tenant <> '');
ALTER TABLE ingest_jobs ADD COLUMN tenant text NOT NULL DEFAULT 'default' CHECK (tenant <> '');
ALTER TABLE workflow_node_jobs ADD COLUMN tenant text NOT NULL DEFAULT 'default' CHECK (tenant <> '');

-- The claim walks (queue, tenant, priority) bands, one probe each (a row comparison, hence the
-- ascending priority), and takes a band's oldest job; the old (queue, priority DESC, id) index
-- goes, one index fewer to write per job.
DROP INDEX ingest_jobs_claim_idx;
DROP INDEX workflow_node_jobs_claim_idx;
CREATE INDEX ingest_jobs_claim_idx ON ingest_jobs (queue, tenant, priority, id) WHERE status = 'queued';
CREATE INDEX workflow_node_jobs_claim_idx ON workflow_node_jobs (queue, tenant, priority, id) WHERE status = 'queued';

-- Weights, global to a tenant (any queue); a tenant absent here weighs 1.
CREATE TABLE tenant_weights (
    tenant text PRIMARY KEY CHECK (tenant <> ''),
    -- NaN and infinity fail the range too (NaN <= 10000 is false).
    weight double precision NOT NULL CONSTRAINT tenant_weights_weight_range CHECK (weight > 0 AND weight <= 10000),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Per (queue, tenant): its virtual time, charged by the claims made while another tenant of the
-- queue was also active (jobs over weight). `active`: the tenant has had queued work since the
-- tenant sweep last saw it empty; the claim walks only active tenants, least virtual time first.
CREATE TABLE tenant_shares (
    queue text NOT NULL,
    tenant text NOT NULL,
    vtime double precision NOT NULL DEFAULT 0,
    served bigint NOT NULL DEFAULT 0,
    active boolean NOT NULL DEFAULT true,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, tenant)
) WITH (fillfactor = 50);
-- vtime is left out of every index, so a claim's charge is a HOT update (room kept by the fillfactor)
-- and adds no index entry: the claim sorts the queue's active tenants itself.
CREATE INDEX tenant_shares_active_idx ON tenant_shares (queue) WHERE active;

-- A tenant whose job becomes queued is active from then on: a new or returning tenant starts at the
-- least virtual time among the queue's active tenants (start-time fair queuing), so it is served
-- next and banks no credit for the time it had nothing queued. An already active tenant is only
-- read, never locked, so enqueuers of one tenant never queue behind each other.
CREATE FUNCTION qw_tenants_activate(pairs text[][]) RETURNS void LANGUAGE sql AS $$
    INSERT INTO tenant_shares AS s (queue, tenant, vtime)
    SELECT n.queue, n.tenant,
           coalesce((SELECT a.vtime FROM tenant_shares AS a WHERE a.queue = n.queue AND a.active ORDER BY a.vtime LIMIT 1), 0)
      FROM (SELECT DISTINCT pairs[i][1] AS queue, pairs[i][2] AS tenant FROM generate_subscripts(pairs, 1) AS i) AS n
     WHERE NOT EXISTS (SELECT FROM tenant_shares AS x WHERE x.queue = n.queue AND x.tenant = n.tenant AND x.active)
     ORDER BY n.queue, n.tenant  -- rows locked in one order: concurrent enqueues cannot deadlock
    ON CONFLICT (queue, tenant) DO UPDATE SET active = true, vtime = greatest(s.vtime, EXCLUDED.vtime), updated_at = now()
     WHERE NOT s.active;
$$;
CREATE FUNCTION qw_tenants_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM qw_tenants_activate(ARRAY(SELECT ARRAY[r.queue, r.tenant] FROM new_rows AS r WHERE r.status = 'queued' GROUP BY r.queue, r.tenant));
    RETURN NULL;
END
$$;
CREATE FUNCTION qw_tenant_requeued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM qw_tenants_activate(ARRAY[ARRAY[NEW.queue, NEW.tenant]]);
    RETURN NULL;
END
$$;
CREATE TRIGGER ingest_jobs_tenants_inserted AFTER INSERT ON ingest_jobs
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION qw_tenants_inserted();
CREATE TRIGGER workflow_node_jobs_tenants_inserted AFTER INSERT ON workflow_node_jobs
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION qw_tenants_inserted();
CREATE TRIGGER ingest_jobs_tenant_requeued AFTER UPDATE OF status ON ingest_jobs
    FOR EACH ROW WHEN (NEW.status = 'queued' AND OLD.status <> 'queued') EXECUTE FUNCTION qw_tenant_requeued();
CREATE TRIGGER workflow_node_jobs_tenant_requeued AFTER UPDATE OF status ON workflow_node_jobs
    FOR EACH ROW WHEN (NEW.status = 'queued' AND OLD.status <> 'queued') EXECUTE FUNCTION qw_tenant_requeued();

-- The tenants of jobs already queued when this migration runs.
SELECT qw_tenants_activate(ARRAY(SELECT ARRAY[queue, tenant] FROM (
    SELECT queue, tenant FROM ingest_jobs WHERE status = 'queued'
    UNION SELECT queue, tenant FROM workflow_node_jobs WHERE status = 'queued') AS q));

-- Workers charge shares in their claim, and every role that queues a job activates its tenant;
-- weights are the operator's.
GRANT SELECT, INSERT, UPDATE ON tenant_shares TO qw_worker, qw_scheduler, qw_dashboard;
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON tenant_weights FROM qw_worker;

-- A run's nodes, and a child run, belong to the run's tenant, whatever path inserts them.
CREATE FUNCTION qw_node_run_tenant() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.run_id IS NOT NULL THEN
        NEW.tenant := coalesce((SELECT r.tenant FROM workflow_runs r WHERE r.id = NEW.run_id), NEW.tenant);
    END IF;
    RETURN NEW;
END
$$;
CREATE FUNCTION qw_child_run_tenant() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.parent_run_id IS NOT NULL THEN
        NEW.tenant := coalesce((SELECT r.tenant FROM workflow_runs r WHERE r.id = NEW.parent_run_id), NEW.tenant);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER workflow_node_jobs_run_tenant BEFORE INSERT ON workflow_node_jobs
    FOR EACH ROW EXECUTE FUNCTION qw_node_run_tenant();
CREATE TRIGGER workflow_runs_parent_tenant BEFORE INSERT ON workflow_runs
    FOR EACH ROW EXECUTE FUNCTION qw_child_run_tenant();
