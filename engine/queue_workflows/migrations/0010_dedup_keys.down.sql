DROP INDEX IF EXISTS ingest_jobs_dedup_recent_idx;
DROP INDEX IF EXISTS ingest_jobs_dedup_live_idx;
ALTER TABLE ingest_jobs DROP COLUMN IF EXISTS dedup_key;
