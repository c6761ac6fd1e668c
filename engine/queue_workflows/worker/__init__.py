"""The claim worker: claiming, running and finishing jobs, batch mode, liveness."""
