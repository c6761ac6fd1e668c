DROP TABLE IF EXISTS workflow_node_jobs;
