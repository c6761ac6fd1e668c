"""Batch mode for cpu and ingest workers: many small jobs per claim, per transaction, per wake-up."""

from .runner import MODES, BatchRunner
from .worker import BatchWorker

__all__ = ["MODES", "BatchRunner", "BatchWorker"]
