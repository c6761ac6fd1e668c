"""Run a vendor tool or a vendor library call with a deadline, and report it absent when it misbehaves.

A GPU tool can hang for minutes on a wedged device. A subprocess runs in its own session so
that the whole process group (a wrapper script's children too) is killed at the deadline;
a library call runs on a daemon thread that is abandoned at the deadline, and while it is
still stuck the next call for that library is refused at once instead of stacking threads.
"""

from __future__ import annotations

import importlib
import logging
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from types import ModuleType
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_OUTPUT_BYTES = 4 * 1024 * 1024


def run_tool(tool: str, args: list[str], *, timeout: float) -> str | None:
    """The stdout of `tool args` (found on PATH), or None when it is missing, fails, hangs or prints nothing."""
    path = shutil.which(tool)
    if path is None:
        return None
    try:
        proc = subprocess.Popen(
            [path, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        log.debug("%s could not start: %s", tool, exc)
        return None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        log.warning("%s %s did not answer within %.1fs: reported absent", tool, " ".join(args), timeout)
        return None
    text = out[:MAX_OUTPUT_BYTES].decode(errors="replace")
    if proc.returncode != 0:
        # nvidia-smi exits non-zero when one device is lost but still prints the others.
        log.debug("%s exited %s: %s", tool, proc.returncode, err.decode(errors="replace").strip()[:200])
    return text if text.strip() else None


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    try:
        proc.communicate(timeout=1.0)
    except subprocess.TimeoutExpired:  # a grandchild that left the group still holds the pipe
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        proc.wait(timeout=1.0)


class GuardedCall:
    """Calls into one in-process library, each bounded by a deadline; none while an abandoned one is still stuck.

    Calls that return in time may overlap (callers on several threads); only a call abandoned
    at its deadline blocks the ones after it, until it finally returns.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._stuck = 0

    def __call__(self, fn: Callable[[], T], *, timeout: float) -> T | None:
        with self._lock:
            if self._stuck:
                log.warning("%s: an earlier call is still stuck: reported absent", self.name)
                return None
        box: list[T] = []
        done = threading.Event()
        abandoned = threading.Event()

        def target() -> None:
            try:
                box.append(fn())
            except Exception as exc:  # noqa: BLE001 - a failing library is an absent source
                log.debug("%s failed: %s", self.name, exc)
            finally:
                with self._lock:
                    done.set()
                    if abandoned.is_set():
                        self._stuck -= 1

        threading.Thread(target=target, name=f"probe-{self.name}", daemon=True).start()
        if not done.wait(timeout):
            with self._lock:
                if not done.is_set():
                    abandoned.set()
                    self._stuck += 1
                    log.warning("%s did not answer within %.1fs: reported absent", self.name, timeout)
                    return None
        return box[0] if box else None


def optional_module(name: str) -> ModuleType | None:
    """The vendor binding `name`, or None when it is not installed or its native library is missing."""
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - ImportError, OSError from a broken install: the source is absent
        return None
