"""Face: the seed's `queue_workflows.scheduler`; the scheduler lives in `queue_workflows.schedule`.

    from queue_workflows.scheduler import ScheduleEntry
    queue_workflows.set_ingest_schedule([ScheduleEntry("fetch", 37, "run_fetch_all", "fetch")])

`queue-scheduler` / `python -m queue_workflows.scheduler` / `main()` run the ticker;
several replicas enqueue each slot exactly once.
"""

from __future__ import annotations

from queue_workflows.schedule import (
    InvalidScheduleError,
    ScheduleEntry,
    Ticker,
    ingest_schedule,
    main,
    run,
    run_once,
    schedule_status,
    set_ingest_schedule,
)

__all__ = [
    "InvalidScheduleError",
    "ScheduleEntry",
    "Ticker",
    "ingest_schedule",
    "main",
    "run",
    "run_once",
    "schedule_status",
    "set_ingest_schedule",
]

if __name__ == "__main__":
    raise SystemExit(main())
