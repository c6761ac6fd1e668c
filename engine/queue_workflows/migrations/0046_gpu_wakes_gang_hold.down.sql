DROP INDEX workflow_node_jobs_gang_idx;
DROP TRIGGER workflow_node_jobs_gpu_room_freed ON workflow_node_jobs;
DROP FUNCTION qw_gpu_room_freed();
