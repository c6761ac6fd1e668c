-- Orchestrator leadership. Who may lead is decided by a session advisory lock (it dies with
-- the leader's connection); what a leader may still do is decided by the epoch below: each new
-- leader bumps it, and every leader transaction first reads it FOR SHARE. The bump waits for
-- the old leader's in-flight transactions, and after it the old leader's reads find another
-- epoch, so two leaders' work never interleaves even when the old one has not noticed its loss.
CREATE TABLE qw_leadership (
    id        smallint PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    epoch     bigint NOT NULL DEFAULT 0,
    leader_id text,
    since     timestamptz
);
INSERT INTO qw_leadership DEFAULT VALUES;

-- Every running orchestrator, leader or standby, refreshed about once a second (a container
-- health check reads its own row; `qw status` lists them).
CREATE TABLE qw_orchestrators (
    orchestrator_id text PRIMARY KEY,
    hostname        text NOT NULL,
    host_label      text NOT NULL,
    pid             integer NOT NULL,
    role            text NOT NULL DEFAULT 'standby' CHECK (role IN ('leader', 'standby')),
    epoch           bigint,
    started_at      timestamptz NOT NULL DEFAULT now(),
    beat_at         timestamptz NOT NULL DEFAULT now()
);
