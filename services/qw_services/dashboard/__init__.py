"""The operator dashboard (`queue-dashboard`, `qw web`): a live page of hosts, workers, queues, runs and jobs."""
