ALTER TABLE workflow_node_jobs DROP COLUMN IF EXISTS batch_suspect;
ALTER TABLE ingest_jobs DROP COLUMN IF EXISTS batch_suspect;
