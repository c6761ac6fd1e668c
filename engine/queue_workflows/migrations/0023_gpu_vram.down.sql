ALTER TABLE workflow_node_jobs DROP COLUMN IF EXISTS unassignable_reason;
ALTER TABLE worker_heartbeats DROP COLUMN IF EXISTS vram_free_gb, DROP COLUMN IF EXISTS vram_total_gb;
DROP TABLE IF EXISTS gpu_models;
