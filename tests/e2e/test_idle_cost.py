"""What an idle stack costs: CPU of every running container over a quiet window, health checks included.

Issue 19 asks for 18 idle containers within 5 % of one core (0.28 % each). Health checks are
now a few milliseconds a check; what remains is the services' own idle loops (a worker's beat
wakes every 0.25 s and its safety poll every second, the leader sweeps every 0.25 s) and
Postgres serving them: about 0.9 % a container on this 2-core machine. This test guards that
level against regressions (2 % each) and prints the figures; the 0.28 % target is still open.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from procs import wait_until


def _usage_ns(container_id: str) -> int:
    for path in (Path(f"/sys/fs/cgroup/cpuacct/docker/{container_id}/cpuacct.usage"),
                 Path(f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/cpu.stat"),
                 Path(f"/sys/fs/cgroup/docker/{container_id}/cpu.stat")):
        if path.exists():
            text = path.read_text()
            if path.name == "cpu.stat":
                return 1000 * int(dict(line.split() for line in text.splitlines())["usage_usec"])
            return int(text)
    raise AssertionError(f"no cgroup CPU account found for container {container_id}")


def test_an_idle_stack_costs_little_cpu(stack):
    wait_until(lambda: all(state == ("running", "healthy") for name, states in stack.states().items()
                           if name not in {"migrate", "demo"} for state in states),
               timeout=180, interval=2, what="every service to report healthy")
    ids = {cid: name for name in stack.states() for cid in stack.containers(name)}
    ids = {subprocess.run(["docker", "inspect", "-f", "{{.Id}}", cid], capture_output=True, text=True, check=True).stdout.strip(): name
           for cid, name in ids.items()}
    before = {cid: _usage_ns(cid) for cid in ids}
    started = time.monotonic()
    time.sleep(30)  # the quantity measured is time itself: CPU over a fixed idle window
    elapsed = time.monotonic() - started
    share = {cid: (_usage_ns(cid) - before[cid]) / 1e9 / elapsed for cid in ids}
    for cid, used in sorted(share.items(), key=lambda kv: -kv[1]):
        print(f"\n  {ids[cid]:<16} {100 * used:6.2f} % of one core", end="")
    total = sum(share.values())
    print(f"\nidle stack: {len(ids)} containers, {100 * total:.2f} % of one core in all, {100 * total / len(ids):.2f} % each")
    assert total / len(ids) <= 0.02, "an idle container costs about 0.9 % of a core; this is a regression"
