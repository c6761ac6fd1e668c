"""Split the host's CPU and RAM between this stack's containers and everything else on the box.

CPU is a rate: each container's cgroup CPU time is differenced against the previous
sample, so the first sample after start (or after a container appears) has no CPU figure.
Percentages are of the whole host (all cores), like the host's own CPU percent, so the
stack's share and the rest add up to the host figure. Without a cgroup tree or a Docker
answer there is no attribution (None); the sidecar reports host figures regardless.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from queue_workflows.settings import Settings
from queue_workflows.telemetry import cgroups
from queue_workflows.telemetry.containers import ContainerRef, Lister, SocketDenied, docker_lister

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ContainerUsage:
    id: str
    name: str
    cpu_percent: float | None
    memory_bytes: int | None


@dataclass(frozen=True)
class StackUsage:
    cgroup_version: int
    cpu_percent: float | None  # the stack's containers, of the whole host; None until two samples
    memory_bytes: int
    other_cpu_percent: float | None  # the host's CPU percent minus the stack's
    other_memory_bytes: int | None
    containers: tuple[ContainerUsage, ...]


class Attribution:
    def __init__(
        self,
        *,
        cgroup_root: Path,
        lister: Lister | None,
        cpu_count: int,
        now_fn: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cgroup_root = cgroup_root
        self.lister = lister
        self.cpu_count = max(1, cpu_count)
        self.now_fn = now_fn
        self._previous: dict[str, tuple[float, int]] = {}  # container id -> (when, cpu_usec)
        self._why_none: str | None = None

    def sample(self, *, host_cpu_percent: float | None = None, host_memory_used_bytes: int | None = None) -> StackUsage | None:
        """The stack's share now, or None (logged once per reason) when the tree or Docker is not there."""
        version = cgroups.cgroup_version(self.cgroup_root)
        if version is None:
            return self._off(f"no cgroup tree at {self.cgroup_root} (mount the host's /sys/fs/cgroup there, read-only)")
        if self.lister is None:
            return self._off("no Docker client configured")
        try:
            refs = self.lister()
        except SocketDenied as exc:
            return self._off(str(exc))
        except Exception as exc:  # noqa: BLE001 - no socket, permission denied, API error
            return self._off(f"Docker did not list the stack's containers: {type(exc).__name__}: {exc}")
        usage = self._measure(version, refs, host_cpu_percent, host_memory_used_bytes)
        if refs and not usage.containers:  # e.g. the sidecar's own namespaced /sys/fs/cgroup, not the host's
            return self._off(
                f"none of the stack's {len(refs)} container(s) has a cgroup under {self.cgroup_root} "
                "(system.slice/docker-<id>.scope or docker/<id>): is the host's tree mounted there?"
            )
        if self._why_none is not None:
            log.info("cgroup attribution available again (cgroup v%d, %d container(s))", version, len(refs))
            self._why_none = None
        return usage

    def _off(self, why: str) -> StackUsage | None:
        if why != self._why_none:
            log.warning("cgroup attribution off: %s; reporting host figures only", why)
            self._why_none = why
        self._previous.clear()
        return None

    def _measure(
        self, version: cgroups.CgroupVersion, refs: list[ContainerRef], host_cpu: float | None, host_memory: int | None
    ) -> StackUsage:
        now = self.now_fn()
        usages: list[ContainerUsage] = []
        seen: dict[str, tuple[float, int]] = {}
        for ref in refs:
            usage = cgroups.find_container(self.cgroup_root, version, ref.id)
            if usage is None:
                continue  # stopped since the listing, or its cgroup is elsewhere
            percent = None
            if usage.cpu_usec is not None:
                seen[ref.id] = (now, usage.cpu_usec)
                before = self._previous.get(ref.id)
                if before is not None and now > before[0] and usage.cpu_usec >= before[1]:
                    elapsed_usec = (now - before[0]) * 1e6
                    percent = 100.0 * (usage.cpu_usec - before[1]) / (elapsed_usec * self.cpu_count)
            usages.append(ContainerUsage(ref.id, ref.name, percent, usage.memory_bytes))
        self._previous = seen
        memory = sum(u.memory_bytes or 0 for u in usages)
        known = [u.cpu_percent for u in usages if u.cpu_percent is not None]
        cpu = sum(known) if usages and len(known) == len(usages) else (None if usages else 0.0)
        return StackUsage(
            cgroup_version=version,
            cpu_percent=cpu,
            memory_bytes=memory,
            other_cpu_percent=None if cpu is None or host_cpu is None else max(0.0, host_cpu - cpu),
            other_memory_bytes=None if host_memory is None else max(0, host_memory - memory),
            containers=tuple(usages),
        )


def attribution_from(settings: Settings, *, cpu_count: int) -> Attribution:
    """The stack's containers as the settings select them (prefix, else compose project), read from `cgroup_root`."""
    lister = docker_lister(url=settings.docker_url, prefix=settings.container_prefix, project=settings.compose_project)
    return Attribution(cgroup_root=settings.cgroup_root, lister=lister, cpu_count=cpu_count)


def sample() -> StackUsage | None:
    """One reading from the configured cgroup root and Docker; CPU figures need a second reading (see Attribution)."""
    from queue_workflows import config
    from queue_workflows.telemetry.host import HostReader

    host = HostReader().read()
    attribution = attribution_from(config.current().settings, cpu_count=HostReader.cpu_count())
    return attribution.sample(host_cpu_percent=host.cpu_percent, host_memory_used_bytes=host.memory_used_bytes)
