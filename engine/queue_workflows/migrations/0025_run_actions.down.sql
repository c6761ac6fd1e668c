DROP TABLE IF EXISTS workflow_run_actions;
