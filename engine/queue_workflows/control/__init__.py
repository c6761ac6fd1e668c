"""The operator control plane: per-(host, queue) worker ON/OFF, read by workers, written by anyone."""

from __future__ import annotations

from .api import POLICIES, desired_state_for, disable_worker, enable_worker, list_controls
from .switch import WorkerSwitch

__all__ = ["POLICIES", "WorkerSwitch", "desired_state_for", "disable_worker", "enable_worker", "list_controls"]
