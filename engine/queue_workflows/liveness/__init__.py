"""Worker liveness: the background beat that keeps a running job's worker provably alive."""

from __future__ import annotations

from .beat import LivenessBeat

__all__ = ["LivenessBeat"]
