-- Spans the flow_span task records (tests/contracts/test_invariant_flow_limits_procs.py).
CREATE TABLE test_flow_spans (
    id         bigserial PRIMARY KEY,
    key        text NOT NULL,
    token      text NOT NULL,
    pid        integer NOT NULL,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at   timestamptz,
    live_seen  integer
);
