"""The worker's exit codes, and the one way a worker leaves in the middle of a job.

A job's code is never interrupted: when the worker must stop running it, the process ends,
which frees its memory (and VRAM) and drops its connections, so the cluster sees it gone.
The processes the job started end with it: they are the job's work too, and left running
they would go on beside its next attempt.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import psutil

from queue_workflows.common import tracing
from queue_workflows.pooler import EXIT_TRANSACTION_POOLER

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_BUDGET = 75
EXIT_STALLED = 76
EXIT_JOB_TAKEN = 77
EXIT_DEVICE_ERROR = 78
EXIT_HARD_STOP = 79
EXIT_TRANSACTION_POOLER = EXIT_TRANSACTION_POOLER  # 80, at start: the DSN goes through a transaction-mode pooler (docs/poolers.md)


_owns_tree = False  # set where the process belongs to one worker: only then are its descendants the job's


def lead_process_group() -> None:
    """At a worker process's start: lead a process group of its own, so a job's orphaned
    grandchildren can still be found in it.

    Not in a terminal's foreground group (Ctrl-C must still reach the worker there), and not
    when it leads one already (a shell's job, a container's init).
    """
    if os.getpgrp() == os.getpid():
        return
    try:
        with open("/dev/tty", "rb") as tty:
            if os.tcgetpgrp(tty.fileno()) == os.getpgrp():
                return
    except OSError:
        pass  # no controlling terminal
    try:
        os.setpgid(0, 0)
    except OSError as exc:
        log.debug("process group not taken: %s", exc)


@contextmanager
def owning_job_processes() -> Iterator[None]:
    """While a worker runs as this process's one job: its other processes are its jobs', ended by `kill_job_processes`."""
    global _owns_tree
    _owns_tree = True
    try:
        yield
    finally:
        _owns_tree = False


def kill_job_processes() -> int:
    """SIGKILL this process's descendants and the rest of the process group it leads; how many were signalled."""
    if not _owns_tree:
        return 0
    me = os.getpid()
    killed: set[int] = set()
    for _ in range(3):  # again, for any a dying parent forked meanwhile
        found = {pid for pid in {child.pid for child in _descendants()} | _group_members(me) if _running(pid)}
        found -= killed | {me}
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        killed |= found
    if killed:
        log.warning("killed %d process(es) the job left running: %s", len(killed), sorted(killed))
    return len(killed)


def _descendants() -> list[psutil.Process]:
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def _running(pid: int) -> bool:
    """Not gone, and not a zombie: one killed already, waiting for its parent to reap it."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _group_members(me: int) -> set[int]:
    if os.getpgrp() != me:
        return set()  # the group is a supervisor's or a terminal's: not ours to end
    members = set()
    for pid in psutil.pids():
        try:
            if pid != me and os.getpgid(pid) == me:
                members.add(pid)
        except OSError:
            pass
    return members


def exit_now(code: int, reason: str) -> None:
    """Log `reason`, end the job's processes, flush, and end the process with `code` at once."""
    log.critical("exiting with code %d: %s", code, reason)
    try:
        kill_job_processes()
    except Exception:  # noqa: BLE001 - leaving anyway
        log.exception("the job's processes could not all be ended")
    for handler in logging.getLogger().handlers:
        try:
            handler.flush()
        except Exception:  # noqa: BLE001 - leaving anyway
            pass
    sys.stderr.flush()
    tracing.flush(1.0)  # the spans that ended (the job's claim): os._exit skips the exporter's own flush
    os._exit(code)
