ALTER TABLE workflow_node_jobs DROP COLUMN IF EXISTS retry_policy;
