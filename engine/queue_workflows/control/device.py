"""Is the GPU answering? Asked before a gpu worker claims again after exit 75, 76 or 79.

A CUDA/HIP context killed mid-kernel can leave the device in an error state; a worker that
claimed straight away would fail job after job on it. The check runs the vendor's tool
(`nvidia-smi -L`, `rocm-smi --showid`) unless the GPU side installs its own probe.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from collections.abc import Callable

from queue_workflows import db
from queue_workflows.common import sqlfile
from queue_workflows.control.switch import WorkerSwitch

_CONTROL = sqlfile.load("queue_workflows.control", "control.sql")

log = logging.getLogger(__name__)

DeviceProbe = Callable[[], "str | None"]  # None: healthy; else why not
TOOLS = (("nvidia-smi", ["-L"]), ("rocm-smi", ["--showid"]))


def smi_probe(timeout: float = 15.0) -> str | None:
    for tool, args in TOOLS:
        path = shutil.which(tool)
        if path is None:
            continue
        try:
            done = subprocess.run([path, *args], capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{tool} did not answer: {exc}"
        if done.returncode != 0 or not done.stdout.strip():
            detail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            return f"{tool} {' '.join(args)} failed (exit {done.returncode}): {detail[0]}"
        return None
    log.info("no nvidia-smi or rocm-smi on PATH: nothing to check the device with")
    return None


_probe: DeviceProbe = smi_probe


def set_device_probe(probe: DeviceProbe) -> None:
    """Install the GPU side's own device check (returns None when healthy, else the reason)."""
    global _probe
    if not callable(probe):
        raise TypeError(f"set_device_probe: {probe!r} is not callable")
    _probe = probe


def mark_device_check(conn: db.Conn, host_label: str, queue: str, pending: bool) -> None:
    conn.execute(_CONTROL.sql("set_device_check"), {"host_label": host_label, "queue": queue, "pending": pending})


def check_device_if_pending(conn: db.Conn, switch: WorkerSwitch, row: dict | None) -> None:
    """Probe when the last process exited by a trip; park (saying why) until the device answers."""
    if not row or not row.get("device_check_pending"):
        switch.unblock()
        return
    why = _probe()
    if why is None:
        mark_device_check(conn, switch.host_label, switch.queue, False)
        switch.unblock()
        log.info("device check passed for %s", switch.payload)
    else:
        switch.block(f"device check failed: {why}")
