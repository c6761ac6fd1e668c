"""The orchestrator and the services only the leading orchestrator runs: reclaim, retention, dispatch."""
