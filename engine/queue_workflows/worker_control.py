"""Face: the seed's `queue_workflows.worker_control`; worker OFF/ON lives in `queue_workflows.control`.

    worker_control.disable_worker("spark", "gpu")          # hard stop: requeue its job, exit 79, stay parked
    worker_control.enable_worker("spark", "gpu")           # resume in place, no restart
"""

from __future__ import annotations

from queue_workflows.control.api import desired_state_for, disable_worker, enable_worker, list_controls
from queue_workflows.control.commands import main, switch_from_shell

__all__ = ["desired_state_for", "disable_worker", "enable_worker", "list_controls", "main", "switch_from_shell"]

if __name__ == "__main__":
    raise SystemExit(main())
