-- Deduplication: at most one live (scheduled, queued or running) ingest job per key. The
-- unique index, not a read-then-write, is what makes concurrent enqueuers agree.
ALTER TABLE ingest_jobs ADD COLUMN dedup_key text;
CREATE UNIQUE INDEX ingest_jobs_dedup_live_idx ON ingest_jobs (dedup_key)
    WHERE dedup_key IS NOT NULL AND status IN ('scheduled', 'queued', 'running');
CREATE INDEX ingest_jobs_dedup_recent_idx ON ingest_jobs (dedup_key, finished_at)
    WHERE dedup_key IS NOT NULL;
