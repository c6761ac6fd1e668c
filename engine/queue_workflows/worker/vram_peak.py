"""A job's peak VRAM: sampled on a thread through the job, and the framework's own peak where torch runs on CUDA.

A reading at the job's end sees what the job still holds, not what it needed: a job that
allocates 20 GB, frees it and returns reads as 0. The sampler reads the worker process's (and
its children's) GPU memory every `interval` seconds from the job's start to its end and keeps
the highest; where the job used torch on CUDA, torch's peak reserved memory since the job
started counts too (worker/framework_peak.py: it sees allocations too short for any sampler,
but not the CUDA context's own memory, which NVML counts). The larger of the two is the peak.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from queue_workflows.worker.framework_peak import framework_peak_bytes, framework_reset_peak

log = logging.getLogger(__name__)

Probe = Callable[[], "int | None"]


def is_own(pid: int, *, depth: int = 32) -> bool:
    """This process, or one it started (a job's subprocesses hold VRAM of their own): walks `pid`'s parents.

    Asked only for the few pids the GPU lists, so it stays cheap where listing this process's
    children would scan every process on the host. A pid from another PID namespace (NVML in a
    container reports the host's) or one that ended mid-walk is not ours.
    """
    me = os.getpid()
    try:
        import psutil

        for _ in range(depth):
            if pid == me:
                return True
            if pid <= 1:
                return False
            pid = psutil.Process(pid).ppid()
    except Exception as exc:  # noqa: BLE001 - gone, or not ours to read
        log.debug("could not read process %s: %s", pid, exc)
    return False


class _Run:
    """One job's readings: a sampler thread abandoned while stuck writes only to its own job's."""

    def __init__(self) -> None:
        self.peak: int | None = None
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def seen(self, value: int | None) -> None:
        if value is not None:
            with self.lock:
                self.peak = value if self.peak is None else max(self.peak, value)


class PeakSampler:
    """`start()` when the job starts, `stop()` when it ends: the highest reading in between (None: none read)."""

    def __init__(self, probe: Probe, *, interval: float, join_seconds: float = 3.0,
                 framework_reset: Callable[[], None] = framework_reset_peak, framework_peak: Probe = framework_peak_bytes) -> None:
        self.probe = probe
        self.interval = interval
        self.join_seconds = join_seconds  # a probe stuck past its own deadline is not waited for
        self.framework_reset = framework_reset
        self.framework_peak = framework_peak
        self._run: _Run | None = None
        self._thread: threading.Thread | None = None

    def _sample(self, run: _Run, probe: Probe) -> None:
        while True:
            run.seen(probe())
            if run.stop.is_set() or run.stop.wait(self.interval):
                run.seen(probe())  # the job's end: what it still holds counts too
                return

    def start(self, *, sample: bool = True, probe: Probe | None = None) -> None:
        """Begin a job; `sample=False` where the probe is known to read nothing (the framework's peak still counts);
        `probe`, this job's own reading (its reserved devices') in place of the sampler's."""
        self.framework_reset()
        self._run = run = _Run()
        if sample:
            self._thread = threading.Thread(target=self._sample, args=(run, probe or self.probe), name="vram-peak", daemon=True)
            self._thread.start()

    def stop(self) -> int | None:
        run, thread, self._run, self._thread = self._run, self._thread, None, None
        if run is None:
            return None
        run.stop.set()
        if thread is not None:
            thread.join(self.join_seconds)
        run.seen(self.framework_peak())  # the larger of it and the sampled peak
        with run.lock:
            return run.peak
