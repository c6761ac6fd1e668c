-- The job tables churn: every job is inserted, updated twice and, in time, deleted. At the
-- default scale factors a million-row table is vacuumed only after 200,000 dead rows, and the
-- dead entries at the head of the claim index are what every claim walks past meanwhile.
ALTER TABLE ingest_jobs SET (
    autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0);
ALTER TABLE workflow_node_jobs SET (
    autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0);
-- One row per worker, rewritten by every heartbeat.
ALTER TABLE worker_heartbeats SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 200);
