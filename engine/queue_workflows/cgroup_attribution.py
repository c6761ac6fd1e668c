"""Split this host's CPU and RAM between the stack's containers and everything else, from cgroups.

    from queue_workflows import cgroup_attribution
    usage = cgroup_attribution.sample()   # StackUsage, or None without the mounts/socket

It needs the host's cgroup tree mounted read-only at `QW_CGROUP_ROOT` (default
/sys/fs/cgroup) and the Docker socket to list the stack's containers (compose project
label, or `configure(container_prefix=...)`); without them it returns None. CPU and RAM
only: GPU memory per container is not attributed (ROCm has no per-process counters).
"""

from __future__ import annotations

from . import config
from .telemetry.attribution import Attribution, ContainerUsage, StackUsage, attribution_from
from .telemetry.cgroups import CgroupUsage, cgroup_version, find_container, read_group
from .telemetry.containers import ContainerRef, StackUnknown, docker_lister, stack_containers
from .telemetry.host import HostReader

__all__ = [
    "Attribution", "CgroupUsage", "ContainerRef", "ContainerUsage", "StackUnknown", "StackUsage",
    "attribution_from", "cgroup_version", "docker_lister", "find_container", "read_group", "sample", "stack_containers",
]


def sample() -> StackUsage | None:
    """One reading from the configured cgroup root and Docker; CPU figures need a second reading (see Attribution)."""
    host = HostReader().read()
    attribution = attribution_from(config.current().settings, cpu_count=HostReader.cpu_count())
    return attribution.sample(host_cpu_percent=host.cpu_percent, host_memory_used_bytes=host.memory_used_bytes)
