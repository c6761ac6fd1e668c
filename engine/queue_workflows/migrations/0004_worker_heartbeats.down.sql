DROP TABLE IF EXISTS worker_heartbeats;
DROP SEQUENCE IF EXISTS worker_lock_key_seq;
