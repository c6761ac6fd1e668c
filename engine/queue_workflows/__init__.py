"""queue_workflows: a Postgres-as-queue workflow engine.

    import queue_workflows
    queue_workflows.configure(db_url_env="MY_DB_URL")
    queue_workflows.db.bootstrap()
    queue_workflows.claim_worker.main(["--queue", "fetch"])

The package's top level holds the public API (this module, `db`, `node_queue`, `bulk`, `tasks`,
`testing`, `config`, `settings`, `errors`) and the seed's faces (modules whose docstring starts
with "Face:", which only re-export); everything else lives in a folder per concern:
`worker/`, `leader/`, `ops/`, `control/`, `dag/`, `gpu/`, `schedule/`, `telemetry/`, `common/`.
See docs/architecture.md.
"""

from __future__ import annotations

from queue_workflows import claim_worker, db, node_queue, worker_control
from queue_workflows.callables import CallableNotAllowedError, register_node_callable
from queue_workflows.config import EngineConfig, configure, current
from queue_workflows.control.throttle import MemoryReadings, set_memory_probe
from queue_workflows.dag import (
    Workflow,
    set_invoke_context,
    set_node_module_package,
    set_node_resolver,
    set_ref_resolver,
    set_workflow_provider,
)
from queue_workflows.dag.audit import run_actions
from queue_workflows.dag.control import cancel_run, restart_run
from queue_workflows.dag.definition import WorkflowValidationError
from queue_workflows.dag.events import event_status, send_event
from queue_workflows.dag.inputs import submit_input
from queue_workflows.dag.store import run_status, start_run
from queue_workflows.errors import (
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
from queue_workflows.fair.tenants import clear_tenant_weight, set_tenant_weight, tenant_shares
from queue_workflows.gpu.registry import set_builtin_model_registrar
from queue_workflows.leader import reclaim
from queue_workflows.ops import admin
from queue_workflows.schedule import ScheduleEntry, set_ingest_schedule
from queue_workflows.settings import Settings
from queue_workflows.tasks import register_ingest_task
from queue_workflows.worker.progress import report_progress

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
    "send_event",
    "event_status",
    "set_invoke_context",
    "set_node_module_package",
    "set_node_resolver",
    "set_ref_resolver",
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
    "set_tenant_weight",
    "clear_tenant_weight",
    "tenant_shares",
    "set_builtin_model_registrar",
    "set_memory_probe",
    "worker_control",
]
