ALTER TABLE workflow_node_jobs
    DROP COLUMN IF EXISTS cpu_seconds, DROP COLUMN IF EXISTS peak_rss_bytes, DROP COLUMN IF EXISTS peak_vram_bytes,
    DROP COLUMN IF EXISTS model_load_seconds, DROP COLUMN IF EXISTS model_hit, DROP COLUMN IF EXISTS wall_seconds;
ALTER TABLE ingest_jobs
    DROP COLUMN IF EXISTS cpu_seconds, DROP COLUMN IF EXISTS peak_rss_bytes, DROP COLUMN IF EXISTS peak_vram_bytes,
    DROP COLUMN IF EXISTS model_load_seconds, DROP COLUMN IF EXISTS model_hit, DROP COLUMN IF EXISTS wall_seconds;
ALTER TABLE worker_heartbeats DROP COLUMN IF EXISTS swapping, DROP COLUMN IF EXISTS loaded_models;
