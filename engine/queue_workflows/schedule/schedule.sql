-- Named queries of the scheduler's slot ledger (queue_workflows.schedule.store).

-- name: schedule_now
SELECT clock_timestamp() AS now;

-- name: schedule_claim_slot
-- The replica whose row lands enqueues the slot's job in this same transaction; a racing
-- replica waits on the uncommitted row, then inserts nothing (or, if the winner rolled back
-- or died, inserts after all). Nothing back: the slot is already taken.
INSERT INTO schedule_slots (entry_name, slot_time, kind, task_name, queue, enqueued_by)
VALUES (%(entry_name)s, %(slot_time)s, %(kind)s, %(task_name)s, %(queue)s, %(enqueued_by)s)
ON CONFLICT (entry_name, slot_time) DO NOTHING
RETURNING *;

-- name: schedule_lock_entry
-- Serialises boot kicks of one entry on its row of schedule_entry_turns (migration 0034), locked
-- by the ON CONFLICT arm whose WHERE writes nothing; only the scheduler's role may take it. A
-- separate statement, so the boot insert that follows takes its snapshot after the lock (and sees
-- a kick another replica just committed).
INSERT INTO schedule_entry_turns AS t (entry_name) VALUES (%(entry_name)s)
ON CONFLICT (entry_name) DO UPDATE SET entry_name = EXCLUDED.entry_name WHERE false;

-- name: schedule_claim_boot
-- A boot kick, unless one for this entry ran within the boot window.
INSERT INTO schedule_slots (entry_name, slot_time, kind, task_name, queue, enqueued_by)
SELECT %(entry_name)s, %(slot_time)s::timestamptz, 'boot', %(task_name)s, %(queue)s, %(enqueued_by)s
 WHERE NOT EXISTS (
       SELECT 1 FROM schedule_slots
        WHERE entry_name = %(entry_name)s AND kind = 'boot'
          AND slot_time > %(slot_time)s::timestamptz - make_interval(secs => %(window_seconds)s))
ON CONFLICT (entry_name, slot_time) DO NOTHING
RETURNING *;

-- name: schedule_set_job
UPDATE schedule_slots SET job_id = %(job_id)s WHERE entry_name = %(entry_name)s AND slot_time = %(slot_time)s;

-- name: schedule_last_slots
-- Per entry, the latest row of the given kinds.
SELECT DISTINCT ON (entry_name) entry_name, slot_time, kind, job_id, enqueued_by, created_at
  FROM schedule_slots
 WHERE kind = ANY(%(kinds)s::text[])
 ORDER BY entry_name, slot_time DESC;

-- name: schedule_prune
-- Old ledger rows, always keeping each entry's latest slot (the catch-up policy reads it).
DELETE FROM schedule_slots s
 WHERE s.slot_time < %(before)s
   AND s.slot_time < (SELECT max(l.slot_time) FROM schedule_slots l WHERE l.entry_name = s.entry_name AND l.kind <> 'boot');
