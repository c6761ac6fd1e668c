DROP TABLE IF EXISTS test_executions;
