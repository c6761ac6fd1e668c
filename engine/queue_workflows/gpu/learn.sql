-- Named queries of the learned VRAM need (docs/gpu.md, "Learned VRAM need and OOM requeue"): an
-- out-of-memory's requeue and raise, and each model's declared, learned and used need.
-- `{table}` is a fixed job table from queue_workflows.queries.

-- name: oom_requeue
-- A GPU out-of-memory, the first for this job: back to the queue with its attempt given back (as in
-- watchdog_trip, only a started row had one charged) and marked, so a second one fails it.
UPDATE {table}
   SET status = 'queued', oom_requeued = true,
       attempts = CASE WHEN started_at IS NOT NULL THEN greatest(attempts - 1, 0) ELSE attempts END,
       error = %(error)s, finished_at = NULL, claimed_by = NULL, claim_lock_key = NULL, lease_expires_at = NULL, updated_at = now()
 WHERE id = %(job_id)s AND claimed_by = %(worker_id)s AND status = 'running' AND NOT oom_requeued
RETURNING id, status, attempts, oom_requeued;

-- name: raise_need_after_oom
-- The model needed more than it was given: at least 1.5x the need it was placed on, and at least what
-- the job held at its peak plus what was still free on the device when it failed (the allocation
-- that failed was larger than that). Only ever raised here; qw_gpu_learn drops it once a task's
-- whole window ran after it.
INSERT INTO gpu_models AS m (model_id, oom_need_gb, oom_at)
VALUES (%(model)s, greatest(qw_gpu_need_gb(%(model)s) * %(factor)s, %(held_gb)s::float8 + %(free_gb)s::float8), now())
ON CONFLICT (model_id) DO UPDATE
   SET oom_need_gb = greatest(m.oom_need_gb, EXCLUDED.oom_need_gb), oom_at = now(), updated_at = now()
RETURNING model_id, oom_need_gb;

-- name: model_needs
-- Per model: what its registering workers declared, what its jobs' peaks taught (and on how many
-- samples), the raise an out-of-memory left, and the need routing uses.
SELECT m.model_id AS model, m.est_vram_gb AS declared_gb, m.learned_vram_gb AS learned_gb, m.learned_samples AS samples,
       m.oom_need_gb AS oom_gb, m.oom_at, qw_gpu_need_gb(m.model_id) AS need_gb,
       coalesce((SELECT jsonb_agg(jsonb_build_object('task', t.task, 'p95_gb', t.p95_gb, 'samples', t.samples) ORDER BY t.task)
                   FROM gpu_task_vram AS t WHERE t.model_id = m.model_id), '[]'::jsonb) AS tasks
  FROM gpu_models AS m
 ORDER BY m.model_id;
