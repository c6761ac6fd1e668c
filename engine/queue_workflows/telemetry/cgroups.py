"""Read a container's CPU time and memory from the host's cgroup tree (v1 or v2, systemd or cgroupfs driver).

Docker puts a container's cgroup at `system.slice/docker-<id>.scope` with the systemd
driver and at `docker/<id>` with cgroupfs. cgroup v2 has one tree (`cpu.stat` usage_usec,
`memory.current`); v1 has a tree per controller (`cpuacct/…/cpuacct.usage` in
nanoseconds, `memory/…/memory.usage_in_bytes`). Every reader returns None rather than
raising when a file is missing, unreadable or malformed: containers come and go between
the listing and the read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

CgroupVersion = Literal[1, 2]
V1_CPU_DIRS = ("cpuacct", "cpu,cpuacct", "cpuacct,cpu")


@dataclass(frozen=True)
class CgroupUsage:
    cpu_usec: int | None  # cumulative CPU time, microseconds
    memory_bytes: int | None


def cgroup_version(root: Path) -> CgroupVersion | None:
    """2 for a unified tree, 1 for per-controller trees, None when `root` holds neither (not mounted)."""
    try:
        if (root / "cgroup.controllers").is_file():
            return 2
        if (root / "memory").is_dir() and _v1_cpu_dir(root) is not None:
            return 1
    except OSError:
        return None
    return None


def container_paths(container_id: str) -> tuple[str, ...]:
    """Where Docker puts a container's cgroup, relative to a hierarchy's root: systemd driver, then cgroupfs."""
    return (f"system.slice/docker-{container_id}.scope", f"docker/{container_id}")


def find_container(root: Path, version: CgroupVersion, container_id: str) -> CgroupUsage | None:
    """The container's usage under whichever layout holds it; None when neither does."""
    for relative in container_paths(container_id):
        usage = read_group(root, version, relative)
        if usage.cpu_usec is not None or usage.memory_bytes is not None:
            return usage
    return None


def read_group(root: Path, version: CgroupVersion, relative: str) -> CgroupUsage:
    return CgroupUsage(cpu_usec(root, version, relative), memory_bytes(root, version, relative))


def cpu_usec(root: Path, version: CgroupVersion, relative: str) -> int | None:
    if version == 2:
        text = _read(root / relative / "cpu.stat")
        for line in (text or "").splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return _non_negative(value)
        return None
    cpu_dir = _v1_cpu_dir(root)
    if cpu_dir is None:
        return None
    nanoseconds = _non_negative(_read(cpu_dir / relative / "cpuacct.usage"))
    return None if nanoseconds is None else nanoseconds // 1000


def memory_bytes(root: Path, version: CgroupVersion, relative: str) -> int | None:
    if version == 2:
        return _non_negative(_read(root / relative / "memory.current"))
    return _non_negative(_read(root / "memory" / relative / "memory.usage_in_bytes"))


def _v1_cpu_dir(root: Path) -> Path | None:
    for name in V1_CPU_DIRS:
        candidate = root / name
        if (candidate / "cpuacct.usage").is_file():
            return candidate
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _non_negative(text: str | None) -> int | None:
    try:
        value = int((text or "").strip())
    except ValueError:
        return None
    return value if value >= 0 else None
