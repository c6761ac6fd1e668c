"""cgroup attribution against fixture trees for v1/v2 x systemd/cgroupfs, this machine's own tree, and a fake Docker API."""

from __future__ import annotations

from pathlib import Path

import pytest

from queue_workflows import cgroup_attribution
from queue_workflows.cgroup_attribution import Attribution, ContainerRef, StackUnknown, cgroup_version, read_group, stack_containers
from queue_workflows.telemetry import cgroups

OURS = ("a" * 64, "qw-worker-1"), ("b" * 64, "qw-orchestrator-1")
FOREIGN = "c" * 64
MIB = 1024 * 1024


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Tree:
    """A host cgroup tree in tmp: `set(id, cpu_seconds, memory)` writes the files each layout reads."""

    def __init__(self, root: Path, version: int, driver: str) -> None:
        self.root, self.version, self.driver = root, version, driver
        if version == 2:
            (root / "cgroup.controllers").parent.mkdir(parents=True, exist_ok=True)
            (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
        else:
            (root / "cpu,cpuacct").mkdir(parents=True)
            (root / "cpu,cpuacct" / "cpuacct.usage").write_text("999999999999\n")
            (root / "cpuacct").symlink_to("cpu,cpuacct")
            (root / "memory").mkdir()

    def rel(self, cid: str) -> str:
        return f"system.slice/docker-{cid}.scope" if self.driver == "systemd" else f"docker/{cid}"

    def set(self, cid: str, cpu_seconds: float, memory: int) -> None:
        if self.version == 2:
            group = self.root / self.rel(cid)
            group.mkdir(parents=True, exist_ok=True)
            usec = int(cpu_seconds * 1e6)
            (group / "cpu.stat").write_text(f"usage_usec {usec}\nuser_usec {usec // 2}\nsystem_usec {usec // 2}\nnr_periods 0\n")
            (group / "memory.current").write_text(f"{memory}\n")
        else:
            cpu = self.root / "cpu,cpuacct" / self.rel(cid)
            mem = self.root / "memory" / self.rel(cid)
            cpu.mkdir(parents=True, exist_ok=True)
            mem.mkdir(parents=True, exist_ok=True)
            (cpu / "cpuacct.usage").write_text(f"{int(cpu_seconds * 1e9)}\n")
            (mem / "memory.usage_in_bytes").write_text(f"{memory}\n")


LAYOUTS = [(2, "systemd"), (2, "cgroupfs"), (1, "systemd"), (1, "cgroupfs")]


@pytest.mark.parametrize(("version", "driver"), LAYOUTS, ids=[f"v{v}-{d}" for v, d in LAYOUTS])
def test_attribution_splits_cpu_and_ram_for_each_layout(tmp_path, version, driver):
    tree = Tree(tmp_path / "cgroup", version, driver)
    (worker, worker_name), (orch, orch_name) = OURS
    tree.set(worker, 100.0, 300 * MIB)
    tree.set(orch, 50.0, 100 * MIB)
    tree.set(FOREIGN, 10.0, 900 * MIB)  # on the box, not in the stack: never counted as ours
    clock = FakeClock()
    refs = [ContainerRef(worker, worker_name), ContainerRef(orch, orch_name)]
    attribution = Attribution(cgroup_root=tree.root, lister=lambda: refs, cpu_count=4, now_fn=clock)

    first = attribution.sample(host_cpu_percent=60.0, host_memory_used_bytes=2000 * MIB)
    assert first is not None and first.cgroup_version == version
    assert first.memory_bytes == 400 * MIB and first.other_memory_bytes == 1600 * MIB
    assert first.cpu_percent is None  # a rate needs two readings

    clock.now += 2.0
    tree.set(worker, 104.0, 320 * MIB)  # 2 cores busy for 2 s: 50 % of a 4-core host
    tree.set(orch, 50.4, 100 * MIB)  # 0.2 of a core: 5 %
    second = attribution.sample(host_cpu_percent=60.0, host_memory_used_bytes=2000 * MIB)
    assert second is not None
    by_name = {c.name: c for c in second.containers}
    assert by_name[worker_name].cpu_percent == pytest.approx(50.0)
    assert by_name[orch_name].cpu_percent == pytest.approx(5.0)
    assert by_name[worker_name].memory_bytes == 320 * MIB
    assert second.cpu_percent == pytest.approx(55.0)
    assert second.other_cpu_percent == pytest.approx(5.0)
    assert second.memory_bytes == 420 * MIB


def test_a_container_gone_between_listing_and_reading_is_skipped(tmp_path):
    tree = Tree(tmp_path / "cgroup", 2, "systemd")
    tree.set(OURS[0][0], 1.0, MIB)
    refs = [ContainerRef(OURS[0][0], "here"), ContainerRef("d" * 64, "gone")]
    usage = Attribution(cgroup_root=tree.root, lister=lambda: refs, cpu_count=2).sample()
    assert usage is not None and [c.name for c in usage.containers] == ["here"]


def test_a_tree_that_holds_none_of_the_stack_is_no_attribution_rather_than_zero(tmp_path):
    tree = Tree(tmp_path / "cgroup", 2, "systemd")  # a container's own namespaced view, say
    refs = [ContainerRef(OURS[0][0], "qw-worker-1")]
    attribution = Attribution(cgroup_root=tree.root, lister=lambda: refs, cpu_count=2)
    assert attribution.sample(host_cpu_percent=10.0, host_memory_used_bytes=MIB) is None
    tree.set(OURS[0][0], 1.0, MIB)
    assert attribution.sample() is not None
    empty = Attribution(cgroup_root=tree.root, lister=lambda: [], cpu_count=2).sample(host_cpu_percent=10.0, host_memory_used_bytes=MIB)
    assert empty is not None and (empty.cpu_percent, empty.memory_bytes, empty.other_memory_bytes) == (0.0, 0, MIB)


def test_malformed_cgroup_files_read_as_unknown_not_errors(tmp_path):
    tree = Tree(tmp_path / "cgroup", 2, "cgroupfs")
    group = tree.root / tree.rel(OURS[0][0])
    group.mkdir(parents=True)
    (group / "cpu.stat").write_text("usage_usec lots\n")
    (group / "memory.current").write_text("max\n")
    assert cgroups.find_container(tree.root, 2, OURS[0][0]) is None
    (group / "memory.current").write_bytes(b"\xff\xfe")
    assert cgroups.read_group(tree.root, 2, tree.rel(OURS[0][0])) == cgroups.CgroupUsage(None, None)


def test_without_the_mount_or_the_socket_there_is_no_attribution(tmp_path):
    def no_socket() -> list[ContainerRef]:
        raise FileNotFoundError("/var/run/docker.sock")

    assert Attribution(cgroup_root=tmp_path / "absent", lister=lambda: [], cpu_count=2).sample() is None
    tree = Tree(tmp_path / "cgroup", 2, "systemd")
    assert Attribution(cgroup_root=tree.root, lister=no_socket, cpu_count=2).sample() is None
    assert Attribution(cgroup_root=tree.root, lister=None, cpu_count=2).sample() is None


def test_the_public_face_returns_none_on_a_box_without_mounts(tmp_path, monkeypatch):
    import queue_workflows

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    queue_workflows.configure(cgroup_root=tmp_path / "nothing-mounted")
    assert cgroup_attribution.sample() is None


def test_this_machines_own_cgroup_tree_where_readable():
    root = Path("/sys/fs/cgroup")
    version = cgroup_version(root)
    if version is None:
        pytest.skip("no cgroup tree readable at /sys/fs/cgroup on this machine")
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    if version == 2:
        own = next(line.split(":", 2)[2] for line in lines if line.startswith("0::"))
        usage = read_group(root, 2, own.lstrip("/"))
        assert usage.cpu_usec is not None and usage.cpu_usec > 0
        if own != "/":  # the root cgroup has no memory.current
            assert usage.memory_bytes is not None and usage.memory_bytes > 0
    else:
        paths = {controller: path for _, controllers, path in (line.split(":", 2) for line in lines) for controller in controllers.split(",")}
        cpu = cgroups.cpu_usec(root, 1, paths.get("cpuacct", "/").lstrip("/"))
        memory = cgroups.memory_bytes(root, 1, paths.get("memory", "/").lstrip("/"))
        assert cpu is not None and cpu > 0
        assert memory is not None and memory > 0


class FakeDockerAPI:
    """Answers the two read calls the lister may make, and records every call made."""

    def __init__(self, rows: list[dict], own: dict | None = None) -> None:
        self.rows, self.own, self.calls = rows, own, []

    def containers(self, filters: dict | None = None, **kwargs):
        self.calls.append(("containers", filters))
        if filters and "label" in filters:
            key, _, value = filters["label"].partition("=")
            return [r for r in self.rows if r.get("Labels", {}).get(key) == value]
        return list(self.rows)

    def inspect_container(self, ident: str):
        self.calls.append(("inspect_container", ident))
        if self.own is None:
            raise RuntimeError("404 Client Error: No such container")
        return self.own

    def __getattr__(self, name: str):
        raise AssertionError(f"the lister called {name}: only read calls are allowed")


ROWS = [
    {"Id": "a" * 64, "Names": ["/qw-worker-1"], "Labels": {"com.docker.compose.project": "qw"}},
    {"Id": "b" * 64, "Names": ["/qw-head-1"], "Labels": {"com.docker.compose.project": "qw"}},
    {"Id": "c" * 64, "Names": ["/grafana"], "Labels": {"com.docker.compose.project": "monitoring"}},
    {"Id": "../../etc", "Names": ["/qw-evil"], "Labels": {"com.docker.compose.project": "qw"}},
    {"Names": "garbage"},
]


def test_docker_selection_by_project_label_prefix_or_own_project():
    api = FakeDockerAPI(ROWS, own={"Config": {"Labels": {"com.docker.compose.project": "monitoring"}}})
    assert [r.name for r in stack_containers(api, prefix=None, project="qw")] == ["qw-head-1", "qw-worker-1"]
    assert [r.name for r in stack_containers(api, prefix="qw-w", project="ignored")] == ["qw-worker-1"]
    assert [r.name for r in stack_containers(api, prefix=None, project=None, own_id="self")] == ["grafana"]
    assert {name for name, _ in api.calls} <= {"containers", "inspect_container"}


def test_outside_a_compose_container_without_a_rule_says_what_to_set():
    with pytest.raises(StackUnknown, match="QW_COMPOSE_PROJECT"):
        stack_containers(FakeDockerAPI(ROWS), prefix=None, project=None, own_id="self")


def test_the_lister_asks_for_its_own_project_once_and_reconnects_after_a_failure(monkeypatch):
    from queue_workflows.telemetry import containers

    apis: list[FakeDockerAPI] = []

    def connect(url, *, timeout):
        apis.append(FakeDockerAPI(ROWS, own={"Config": {"Labels": {"com.docker.compose.project": "qw"}}}))
        return apis[-1]

    monkeypatch.setattr(containers, "docker_api", connect)
    lister = containers.docker_lister(url=None, prefix=None, project=None)
    assert [r.name for r in lister()] == ["qw-head-1", "qw-worker-1"]
    assert [r.name for r in lister()] == ["qw-head-1", "qw-worker-1"]
    assert [name for name, _ in apis[0].calls] == ["inspect_container", "containers", "containers"]

    def broken(filters=None, **kwargs):
        raise ConnectionError("socket gone")

    apis[0].containers = broken  # type: ignore[method-assign]
    with pytest.raises(ConnectionError):
        lister()
    assert [r.name for r in lister()] == ["qw-head-1", "qw-worker-1"] and len(apis) == 2


def test_configure_container_prefix_selects_the_stack_as_the_seed_did(tmp_path, monkeypatch):
    import queue_workflows
    from queue_workflows.telemetry import containers

    tree = Tree(tmp_path / "cgroup", 1, "cgroupfs")
    for row in ROWS[:3]:
        tree.set(row["Id"], 1.0, 10 * MIB)
    monkeypatch.setattr(containers, "docker_api", lambda url, *, timeout: FakeDockerAPI(ROWS))
    queue_workflows.configure(cgroup_root=tree.root, container_prefix="qw-w")
    usage = cgroup_attribution.sample()
    assert usage is not None and [(c.name, c.memory_bytes) for c in usage.containers] == [("qw-worker-1", 10 * MIB)]


SOCKET_DENIED_PROBE = """
import logging, sys
from pathlib import Path
from queue_workflows.telemetry.attribution import Attribution
from queue_workflows.telemetry.containers import docker_lister
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
lister = docker_lister(url="unix://" + sys.argv[2], prefix=None, project="qw")
assert Attribution(cgroup_root=Path(sys.argv[1]), lister=lister, cpu_count=1).sample() is None
"""


def test_a_docker_socket_outside_our_groups_is_a_warning_naming_the_gid_to_set():
    # The sidecar's QW_DOCKER_GID must be the socket's group; a wrong one must say which is right.
    import os
    import socket
    import subprocess
    import sys
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="qw-sock-"))
    where.chmod(0o755)  # reachable by the unprivileged probe; the socket itself is not
    tree = Tree(where / "cgroup", 2, "systemd")
    path = where / "docker.sock"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        server.listen()
        as_root = os.getuid() == 0
        path.chmod(0o660 if as_root else 0o000)
        nobody = {"user": 65534, "group": 65534, "extra_groups": []} if as_root else {}
        probe = subprocess.run([sys.executable, "-c", SOCKET_DENIED_PROBE, str(tree.root), str(path)], capture_output=True,
                               text=True, timeout=60, cwd=Path(__file__).resolve().parents[2], **nobody)  # type: ignore[call-overload]
    finally:
        server.close()
        path.unlink(missing_ok=True)
        (tree.root / "cgroup.controllers").unlink()
        tree.root.rmdir()
        where.rmdir()
    assert probe.returncode == 0, probe.stderr
    gid = os.getgid()
    assert f"cgroup attribution off: permission denied on the Docker socket {path}: it belongs to group {gid}" in probe.stderr
    assert f"set QW_DOCKER_GID={gid} in this host's .env" in probe.stderr
