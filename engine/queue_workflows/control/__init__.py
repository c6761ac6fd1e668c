"""The operator control plane: per-(host, queue) worker ON/OFF, read by workers, written by anyone."""

from __future__ import annotations

from queue_workflows.control.api import POLICIES, desired_state_for, disable_worker, enable_worker, list_controls
from queue_workflows.control.switch import WorkerSwitch

__all__ = ["POLICIES", "WorkerSwitch", "desired_state_for", "disable_worker", "enable_worker", "list_controls"]
