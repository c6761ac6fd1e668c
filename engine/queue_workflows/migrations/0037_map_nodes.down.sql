DELETE FROM workflow_node_jobs WHERE map_node IS NOT NULL;
DROP INDEX IF EXISTS workflow_node_jobs_waiting_maps_idx;
DROP INDEX IF EXISTS workflow_node_jobs_map_open_idx;
DROP INDEX IF EXISTS workflow_node_jobs_map_items_idx;
ALTER TABLE workflow_node_jobs
    DROP CONSTRAINT IF EXISTS workflow_node_jobs_map_item_check,
    DROP COLUMN IF EXISTS map_total,
    DROP COLUMN IF EXISTS map_index,
    DROP COLUMN IF EXISTS map_node;
