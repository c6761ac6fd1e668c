"""Progress reports from inside a running task, for the no-progress (stall) watchdog.

    def render(reason, args):
        for frame in frames:
            draw(frame)
            queue_workflows.report_progress()   # arms the stall watchdog; keeps it quiet

The watchdog is inert until the first report, so a slow start (a cold model load) is
never mistaken for a stall. Outside a worker, a report does nothing.
"""

from __future__ import annotations

from queue_workflows.worker.liveness.watchdogs import JobWatch

_watch: JobWatch | None = None


def bind(watch: JobWatch | None) -> None:
    """The worker process's job watch (one job at a time per process)."""
    global _watch
    _watch = watch


def report_progress() -> None:
    watch = _watch
    if watch is not None:
        watch.beat()
