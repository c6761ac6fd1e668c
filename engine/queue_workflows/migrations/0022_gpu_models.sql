-- What a gpu worker holds: its warm models (none while it swaps), published with its heartbeat.
ALTER TABLE worker_heartbeats
    ADD COLUMN loaded_models text[] NOT NULL DEFAULT '{}',
    ADD COLUMN swapping boolean NOT NULL DEFAULT false;

-- What each finished job cost (queue_workflows.usage), on both job tables.
ALTER TABLE ingest_jobs
    ADD COLUMN cpu_seconds double precision, ADD COLUMN peak_rss_bytes bigint, ADD COLUMN peak_vram_bytes bigint,
    ADD COLUMN model_load_seconds double precision, ADD COLUMN model_hit boolean, ADD COLUMN wall_seconds double precision;
ALTER TABLE workflow_node_jobs
    ADD COLUMN cpu_seconds double precision, ADD COLUMN peak_rss_bytes bigint, ADD COLUMN peak_vram_bytes bigint,
    ADD COLUMN model_load_seconds double precision, ADD COLUMN model_hit boolean, ADD COLUMN wall_seconds double precision;
