-- Map (dynamic fan-out): a map node's items are ordinary node rows (claims, retries, watchdogs
-- and reclaim apply unchanged), named 'map[i]' and tied to their map by map_node/map_index; the
-- map's own row stays 'waiting' while they run and records how many items its list has.
ALTER TABLE workflow_node_jobs
    ADD COLUMN map_node  text,
    ADD COLUMN map_index integer CHECK (map_index >= 0),
    ADD COLUMN map_total integer CHECK (map_total >= 0),
    ADD CONSTRAINT workflow_node_jobs_map_item_check CHECK ((map_node IS NULL) = (map_index IS NULL));
-- Progress, the window and the ordered fan-in read one map's items, never the run's other rows.
CREATE INDEX workflow_node_jobs_map_items_idx ON workflow_node_jobs (run_id, map_node, map_index)
    WHERE map_node IS NOT NULL;
-- A window step counts only the items not completed yet: at most the window, not the map's width.
CREATE INDEX workflow_node_jobs_map_open_idx ON workflow_node_jobs (run_id, map_node, status)
    WHERE map_node IS NOT NULL AND status <> 'completed';
-- The reconcile sweep finds waiting maps without reading the table: there are few at any time.
CREATE INDEX workflow_node_jobs_waiting_maps_idx ON workflow_node_jobs (run_id)
    WHERE status = 'waiting' AND map_total IS NOT NULL;
