"""Runnable roles around the engine: orchestrator, claim worker, dev runner and the `qw` CLI."""
