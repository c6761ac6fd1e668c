ALTER TABLE tenant_shares RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, autovacuum_vacuum_cost_delay);
ALTER TABLE qw_orchestrators RESET (fillfactor, autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, autovacuum_vacuum_cost_delay);
ALTER TABLE qw_leadership RESET (fillfactor, autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, autovacuum_vacuum_cost_delay);
ALTER TABLE worker_heartbeats RESET (fillfactor, autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, autovacuum_vacuum_cost_delay);
ALTER TABLE workflow_node_jobs RESET (fillfactor, autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
    autovacuum_vacuum_insert_scale_factor, autovacuum_vacuum_insert_threshold, autovacuum_analyze_scale_factor,
    autovacuum_analyze_threshold, autovacuum_vacuum_cost_delay);
ALTER TABLE ingest_jobs RESET (fillfactor, autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
    autovacuum_vacuum_insert_scale_factor, autovacuum_vacuum_insert_threshold, autovacuum_analyze_scale_factor,
    autovacuum_analyze_threshold, autovacuum_vacuum_cost_delay);
DROP FUNCTION qw_claim_floor_note(text, text, text, integer, bigint);
DROP FUNCTION qw_claim_floors(text, text, text);
DROP TRIGGER workflow_node_jobs_requeue_bump ON workflow_node_jobs;
DROP TRIGGER ingest_jobs_requeue_bump ON ingest_jobs;
DROP FUNCTION qw_requeue_bump();
DROP SEQUENCE qw_requeue_seq;
