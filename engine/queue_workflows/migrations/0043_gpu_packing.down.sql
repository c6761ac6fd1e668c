DROP FUNCTION IF EXISTS qw_gpu_job_need_gb(text, double precision);
DROP FUNCTION IF EXISTS qw_gpu_need_gb(text);
ALTER TABLE worker_heartbeats DROP COLUMN IF EXISTS gpu_devices;
DROP INDEX IF EXISTS workflow_node_jobs_gpu_devices_idx;
ALTER TABLE workflow_node_jobs DROP COLUMN IF EXISTS vram_reserved_gb, DROP COLUMN IF EXISTS gpu_devices, DROP COLUMN IF EXISTS gpus, DROP COLUMN IF EXISTS vram_gb;
