"""Batch mode for cpu and ingest workers: many small jobs per claim, per transaction, per wake-up."""

from queue_workflows.worker.batch.runner import MODES, BatchRunner
from queue_workflows.worker.batch.worker import BatchWorker

__all__ = ["MODES", "BatchRunner", "BatchWorker"]
