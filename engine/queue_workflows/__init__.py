"""queue_workflows: a Postgres-as-queue workflow engine.

    import queue_workflows
    queue_workflows.configure(db_url_env="MY_DB_URL")
    queue_workflows.db.bootstrap()
    queue_workflows.claim_worker.main(["--queue", "fetch"])
"""

from __future__ import annotations

from . import admin, claim_worker, db, node_queue, reclaim, worker_control
from .config import EngineConfig, configure, current
from .errors import (
    ConfigError,
    InvalidNameError,
    InvalidPayloadError,
    MigrationError,
    QueueWorkflowsError,
    ReservedQueueError,
    SchemaNotReadyError,
    UnknownQueueError,
    UnknownTaskError,
)
from .settings import Settings
from .control.throttle import MemoryReadings, set_memory_probe
from .progress import report_progress
from .schedule import ScheduleEntry, set_ingest_schedule
from .tasks import register_ingest_task
from .callables import CallableNotAllowedError, register_node_callable
from .dag import Workflow, set_invoke_context, set_node_module_package, set_node_resolver, set_workflow_provider
from .dag.store import run_status, start_run
from .dag.audit import run_actions
from .dag.control import cancel_run, restart_run
from .dag.inputs import submit_input
from .dag.validate import WorkflowValidationError

__version__ = "0.1.0"

__all__ = [
    "admin",
    "Workflow",
    "WorkflowValidationError",
    "run_status",
    "cancel_run",
    "restart_run",
    "run_actions",
    "submit_input",
    "set_invoke_context",
    "set_node_module_package",
    "set_node_resolver",
    "set_workflow_provider",
    "start_run",
    "ConfigError",
    "EngineConfig",
    "InvalidNameError",
    "InvalidPayloadError",
    "MemoryReadings",
    "MigrationError",
    "QueueWorkflowsError",
    "ReservedQueueError",
    "ScheduleEntry",
    "SchemaNotReadyError",
    "Settings",
    "UnknownQueueError",
    "UnknownTaskError",
    "claim_worker",
    "configure",
    "current",
    "db",
    "node_queue",
    "reclaim",
    "register_ingest_task",
    "register_node_callable",
    "CallableNotAllowedError",
    "report_progress",
    "set_ingest_schedule",
    "set_memory_probe",
    "worker_control",
]
