DROP TABLE IF EXISTS workflow_runs;
