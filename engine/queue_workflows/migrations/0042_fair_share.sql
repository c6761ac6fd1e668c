-- Weighted fair share across tenants (docs/flow_control.md, "Fair share"): every job carries a
-- tenant; a claim serves, within a queue, the tenant with the least virtual time (jobs served over
-- its weight) that has ready work, found by a loose index scan over the tenants' priority bands.
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
-- queue also had ready work (`charge`: what the last claim added, so concurrent claims add up).
CREATE TABLE tenant_shares (
    queue text NOT NULL,
    tenant text NOT NULL,
    vtime double precision NOT NULL DEFAULT 0,
    charge double precision NOT NULL DEFAULT 0,
    served bigint NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, tenant)
);

-- Workers charge shares in their claim; weights are the operator's.
GRANT SELECT, INSERT, UPDATE ON tenant_shares TO qw_worker;
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
