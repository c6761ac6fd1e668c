DROP TABLE IF EXISTS test_flow_spans;
