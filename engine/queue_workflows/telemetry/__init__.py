"""Host telemetry: GPU probes, the host sampler, cgroup attribution, publishing and Prometheus.

The public faces are `queue_workflows.gpu.probe`, `queue_workflows.hw_metrics` and
`queue_workflows.cgroup_attribution`; the modules here are how they work.
"""
