DROP TABLE IF EXISTS ingest_jobs;
