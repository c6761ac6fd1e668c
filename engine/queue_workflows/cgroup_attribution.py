"""Face: the seed's `queue_workflows.cgroup_attribution`; it lives in `queue_workflows.telemetry`.

    from queue_workflows import cgroup_attribution
    usage = cgroup_attribution.sample()   # StackUsage, or None without the mounts/socket

It needs the host's cgroup tree mounted read-only at `QW_CGROUP_ROOT` (default
/sys/fs/cgroup) and the Docker socket to list the stack's containers (compose project
label, or `configure(container_prefix=...)`); without them it returns None. CPU and RAM
only: GPU memory per container is not attributed (ROCm has no per-process counters).
"""

from __future__ import annotations

from queue_workflows.telemetry.attribution import Attribution, ContainerUsage, StackUsage, attribution_from, sample
from queue_workflows.telemetry.cgroups import CgroupUsage, cgroup_version, find_container, read_group
from queue_workflows.telemetry.containers import ContainerRef, StackUnknown, docker_lister, stack_containers

__all__ = [
    "Attribution", "CgroupUsage", "ContainerRef", "ContainerUsage", "StackUnknown", "StackUsage",
    "attribution_from", "cgroup_version", "docker_lister", "find_container", "read_group", "sample", "stack_containers",
]
