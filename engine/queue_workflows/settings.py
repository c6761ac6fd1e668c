"""The one settings model: environment, `.env` and Docker secrets, prefix ``QW_``."""

from __future__ import annotations

import os
import re
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from queue_workflows.errors import ConfigError

ENV_PREFIX = "QW_"
RESERVED_QUEUES = frozenset({"cpu", "gpu"})
QUEUE_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
HOST_LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
SECRETS_DIR = "/run/secrets"


def iana_zone(name: object) -> ZoneInfo:
    """The IANA time zone `name`; ValueError naming it when it is not one."""
    try:
        return ZoneInfo(name)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - ZoneInfoNotFoundError, ValueError/TypeError for a non-key
        raise ValueError(f"{name!r} is not an IANA time zone (e.g. UTC, Europe/Berlin)") from None


def _default_host_label() -> str:
    name = socket.gethostname().split(".")[0] or "localhost"
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name)[:63]



def lease_margin_seconds(lease_seconds: float, renew_seconds: float) -> float:
    """How long before its lease lapses a worker gives its job up: a quarter of a short lease, at most 2 s,
    and never more than half the slack between renewals, so a renewal always comes first.

    A loaded host can be late to its own deadline by a good fraction of a second: a tenth of a 3 s
    lease (0.3 s) was overrun in the failure matrix (docs/failure-matrix.md).
    """
    return min(2.0, lease_seconds / 4, (lease_seconds - renew_seconds) / 2)

class Settings(BaseSettings):
    """Immutable runtime settings; build a new one rather than mutating it."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_file=".env",
        extra="ignore",
        frozen=True,
        secrets_dir=SECRETS_DIR if os.path.isdir(SECRETS_DIR) else None,
    )

    database_url: str | None = None
    # A container's password comes from a Docker secret, never from compose.yaml or the image.
    database_password_file: Path | None = Field(default=None, description="file holding the database password, added to the DSN; unreadable is a startup error")
    host_label: str = Field(default_factory=_default_host_label)
    app: str | None = Field(default=None, description="module imported by workers to register tasks")

    lease_seconds: float = Field(default=30.0, gt=0)
    lease_renew_seconds: float = Field(default=10.0, gt=0)
    heartbeat_seconds: float = Field(default=10.0, gt=0)
    poll_seconds: float = Field(default=1.0, gt=0)
    idle_baton: bool = Field(default=True, description="one idle cpu/ingest worker per queue acts on NOTIFY, the others wait in line (idle_baton.py)")
    # Faults a cluster meets (docs/failures.md): libpq's TCP deadlines on every engine connection
    # (connect_timeout, tcp_user_timeout, keepalives), unless the DSN sets its own, so a dropped
    # network fails a statement within seconds instead of the kernel's minutes; 0 leaves the OS's.
    db_network_timeout_seconds: float = Field(default=10.0, ge=0, le=3600, description="TCP deadline of engine connections (connect, unacknowledged data, keepalive); 0: the OS's")
    reclaim_interval_seconds: float = Field(default=0.25, gt=0, le=5)
    orphan_confirm_seconds: float = Field(default=0.15, gt=0, le=5)
    # How many orchestrators the head runs (compose: 2, one leads, one stands by); `qw status` warns below it.
    expected_orchestrators: int = Field(default=1, ge=0, le=100, description="orchestrators the head is configured for; `qw status` warns when fewer beat")
    shutdown_grace_seconds: float = Field(default=20.0, ge=0)
    # Orchestrator leadership: a lease on the server's clock, renewed every leader_renew_seconds
    # (default: a third of the lease); a standby takes over once it lapses (docs/orchestrator.md).
    leader_lease_seconds: float = Field(default=5.0, gt=0, le=3600)
    leader_renew_seconds: float | None = Field(default=None, gt=0)
    schema_wait_seconds: float = Field(default=60.0, ge=0)
    # The compose stack migrates in a one-shot service as the schema owner; its orchestrators, which
    # may not change the schema, wait for it instead (QW_MIGRATE_ON_START=false).
    migrate_on_start: bool = Field(default=True, description="the orchestrator applies migrations at start; false: it waits for the schema")

    max_attempts: int = Field(default=3, ge=1, le=1000)
    retry_base_seconds: float = Field(default=2.0, gt=0)
    retry_max_seconds: float = Field(default=300.0, gt=0)
    max_payload_bytes: int = Field(default=1_048_576, gt=0)
    dedup_window_seconds: float = Field(default=0.0, ge=0)
    claim_order: Literal["highest_first", "lowest_first"] = "highest_first"
    # Fair share (docs/flow_control.md): within a tenant, a priority band's head gains one level per
    # this many seconds it has waited, so low priorities are never starved; 0 turns aging off.
    claim_aging_seconds: float = Field(default=300.0, ge=0, le=86400 * 365)
    # The leader's tenant sweep: a tenant with nothing queued leaves the claim's walk this often.
    tenant_sweep_seconds: float = Field(default=2.0, gt=0, le=3600)

    ingest_queues: Annotated[frozenset[str], NoDecode] = frozenset({"fetch", "load"})
    ingest_default_budget_s: float = Field(default=3600.0, gt=0)
    node_default_budget_s: float = Field(default=3600.0, gt=0)
    node_module_package: str | None = None  # DAG: a node's `call` is imported as "<package>.<call>" first
    # The code a node job may run (callables.py): modules under these packages, plus registered
    # callables; None: the application's top-level package. Never a bare string prefix.
    node_packages: Annotated[frozenset[str] | None, NoDecode] = None
    dispatch_max_attempts: int = Field(default=5, ge=1, le=1000)  # outbox: fan-out tries before the run is poison-flagged
    # Child workflows (dag/child.py): a node that would start a child past either bound fails, naming it.
    max_workflow_depth: int = Field(default=10, ge=0, le=100_000)  # nesting: a top-level run is depth 0
    max_child_runs: int = Field(default=1000, ge=0, le=10_000_000)  # child runs one run may start
    # Retention, pruned by the leading orchestrator (0: keep forever).
    retain_finished_seconds: float = Field(default=7 * 86400.0, ge=0)  # finished jobs and runs
    retain_events_seconds: float = Field(default=30 * 86400.0, ge=0)  # job/node event log, processed outbox rows
    retention_interval_seconds: float = Field(default=60.0, gt=0)
    # Finished jobs leave the hot tables for day-partitioned history (leader/history.py; 0: never).
    history_after_seconds: float = Field(default=300.0, ge=0)  # how long a finished job stays hot
    video_model_ids: Annotated[frozenset[str], NoDecode] = frozenset()
    video_budget_s: float = Field(default=1800.0, gt=0)
    stall_timeout_seconds: float = Field(default=120.0, gt=0)
    watchdog_max_trips: int = Field(default=3, ge=1, le=100)
    worker_max_jobs: int | None = Field(default=None, ge=1)
    # Batch mode (cpu/ingest workers only): rows per claim, how they run, and how many at once.
    batch_size: int = Field(default=1, ge=1, le=1000)
    batch_mode: Literal["sequential", "threads", "async"] = "sequential"
    batch_concurrency: int = Field(default=1, ge=1, le=256)
    memory_throttle_percent: float = Field(default=90.0, gt=0, le=100)
    memory_resume_percent: float = Field(default=80.0, gt=0, le=100)
    # The gpu worker's warm-model cache (docs/gpu.md).
    gpu_model_slots: int = Field(default=1, ge=1, le=64)  # models held at once when no VRAM budget is set
    gpu_vram_budget_gb: float | None = Field(default=None, gt=0)  # or: a budget their est_vram_gb must fit
    gpu_idle_unload_seconds: float | None = Field(default=900.0, gt=0)  # unload a model unused this long
    gpu_cpu_fallback: bool = False  # run gpu jobs on a box with no visible GPU (tests, the demo)
    gpu_routing: Literal["affinity", "fifo"] = "affinity"  # fifo: plain priority order (a baseline)
    gpu_free_vram_gb: float | None = Field(default=None, ge=0)  # overrides the measured free VRAM (routing)
    gpu_second_copy_backlog: int = Field(default=2, ge=1, le=10_000)  # queued jobs per holder before a second copy
    # Multi-GPU jobs that wait this long hold their devices against smaller jobs until they start
    # (docs/gpu.md, "Busy is not warm"); None (configure): never held, and a gang job may starve.
    gpu_gang_hold_seconds: float | None = Field(default=60.0, ge=0)
    gpu_throttle_percent: float = Field(default=85.0, gt=0, le=100)
    gpu_resume_percent: float = Field(default=75.0, gt=0, le=100)
    swap_throttle_percent: float = Field(default=70.0, gt=0, le=100)
    swap_resume_percent: float = Field(default=60.0, gt=0, le=100)
    memory_check_seconds: float = Field(default=5.0, gt=0)
    # A gpu job's peak VRAM is sampled through the job this often (docs/gpu.md, "GPU memory by default").
    gpu_vram_sample_seconds: float = Field(default=0.5, gt=0, le=60)
    # Several jobs per GPU (docs/gpu.md): VRAM a claim leaves unreserved on each device, for the
    # CUDA contexts and fragmentation no estimate covers.
    gpu_vram_margin_gb: float = Field(default=1.0, ge=0, le=1000)

    schedule_timezone: str = Field(default="UTC", description="IANA zone the schedule's minutes and hours are read in")
    schedule_misfire_grace_seconds: float = Field(default=60.0, gt=0)
    schedule_boot_window_seconds: float = Field(default=300.0, ge=0)
    schedule_keep_days: int = Field(default=30, ge=1)
    # Test-only: the scheduler's clock runs `scale` times faster than the database's, from `origin`.
    schedule_time_scale: float = Field(default=1.0, gt=0, le=86400)
    schedule_time_origin: datetime | None = None

    pool_max_size: int = Field(default=4, ge=1, le=100)
    data_dir: Path = Path(".qw")

    # Logging (docs/metrics.md, "Structured logs").
    log_format: Literal["text", "json"] = Field(default="text", description="service logs as text lines, or one JSON object per line naming the job")

    # hw-metrics sidecar (docs/metrics.md).
    hw_metrics_interval_seconds: float = Field(default=5.0, gt=0, le=3600)
    gpu_probe_timeout_seconds: float = Field(default=2.0, gt=0, le=60)
    metrics_port: int = Field(default=9464, ge=0, le=65535, description="Prometheus /metrics port; 0 serves none")
    health_file: Path | None = Field(default=None, description="file each service rewrites after a beat that reached the database; docker/qw-healthy checks its age")
    metrics_addr: str = "0.0.0.0"
    metrics_queue_seconds: float = Field(default=15.0, ge=0, description="how often queue/worker/model figures are read; 0: never")
    cgroup_root: Path = Field(default=Path("/sys/fs/cgroup"), description="the host's cgroup tree, mounted read-only")
    docker_url: str | None = Field(default=None, description="Docker API, e.g. unix:///var/run/docker.sock (default: DOCKER_HOST)")
    compose_project: str | None = None  # the stack's containers by compose label (default: the sidecar's own project)
    container_prefix: str | None = None  # or by name prefix, as the seed did

    # The orchestrator's cluster metrics (docs/metrics.md, "Cluster metrics"): every orchestrator serves
    # /metrics here (0: none); the leader samples the cluster every interval, a standby only its role.
    orchestrator_metrics_port: int = Field(default=9465, ge=0, le=65535, description="the orchestrator's Prometheus /metrics port; 0 serves none")
    orchestrator_metrics_host: str = Field(default="0.0.0.0", min_length=1, pattern=r"^[A-Za-z0-9_.:\[\]-]+$", description="address the orchestrator's /metrics listens on")
    orchestrator_metrics_interval_seconds: float = Field(default=10.0, gt=0, le=3600, description="seconds between the leader's samples of the cluster")
    orchestrator_metrics_max_tasks: int = Field(default=200, ge=1, le=10_000, description="distinct task labels kept; later tasks count as task=\"other\"")

    # Operator dashboard (docs/dashboard.md): localhost unless told; actions need the password.
    dashboard_addr: str = "127.0.0.1"
    dashboard_port: int = Field(default=8765, ge=0, le=65535)
    dashboard_password: SecretStr | None = Field(default=None, description="also read from the Docker secret qw_dashboard_password")
    dashboard_refresh_seconds: float = Field(default=2.0, gt=0, le=300, description="how often the workers/queues panels are re-read without a NOTIFY")
    # Who the dashboard answers (docs/dashboard.md): Host names (empty: the loopback names and
    # dashboard_addr), proxies whose X-Forwarded-For names the client (empty: none), failed logins.
    dashboard_allowed_hosts: Annotated[tuple[str, ...], NoDecode] = ()
    dashboard_trusted_proxies: Annotated[tuple[str, ...], NoDecode] = ()
    dashboard_auth_failures_per_minute: int = Field(default=10, ge=1, le=10_000, description="failed logins per client address")
    dashboard_auth_failures_total_per_minute: int = Field(default=100, ge=1, le=1_000_000, description="failed logins from all clients")

    @field_validator("dashboard_allowed_hosts", "dashboard_trusted_proxies", mode="before")
    @classmethod
    def _split_dashboard_lists(cls, value: Any) -> Any:
        parts = value.split(",") if isinstance(value, str) else value
        return tuple(p.strip() for p in parts if p.strip()) if isinstance(parts, (list, tuple)) else parts

    @field_validator("dashboard_allowed_hosts")
    @classmethod
    def _check_allowed_hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        names = []
        for entry in value:  # lower-cased, without a port: the Host check ignores ports
            name = f"[{entry.lower()}]" if entry.count(":") > 1 and not entry.startswith("[") else entry.lower()
            name = re.sub(r":\d{1,5}$", "", name)
            if not re.fullmatch(r"\*|(\*\.)?[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?|\[[0-9a-f:.]+\]", name):
                raise ValueError(f"{entry!r} is not a host name (e.g. dash.example.org, *.example.org, 10.0.0.5, [::1]; * for any)")
            names.append(name)
        return tuple(names)

    @field_validator("dashboard_trusted_proxies")
    @classmethod
    def _check_trusted_proxies(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        import ipaddress

        for entry in value:
            try:
                entry == "*" or ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(f"{entry!r} is not an IP address or network (e.g. 10.0.0.5, 10.0.0.0/24, ::1; * for any)") from None
        return value

    @field_validator("ingest_queues", "video_model_ids", mode="before")
    @classmethod
    def _split_queues(cls, value: Any) -> Any:
        if isinstance(value, str):
            return frozenset(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("node_packages", mode="before")
    @classmethod
    def _check_node_packages(cls, value: Any) -> Any:
        if value is None:
            return None
        parts = [p.strip() for p in value.split(",") if p.strip()] if isinstance(value, str) else value
        if not isinstance(parts, (list, tuple, set, frozenset)):
            raise ValueError("a comma-separated list of packages, e.g. myapp,otherpkg.nodes")
        for name in parts:
            if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", name, re.ASCII):
                raise ValueError(f"{name!r} is not a dotted module name (e.g. myapp or myapp.nodes)")
        return frozenset(parts)

    @field_validator("ingest_queues")
    @classmethod
    def _check_queues(cls, value: frozenset[str]) -> frozenset[str]:
        if not value:
            raise ValueError("at least one ingest queue is required")
        for name in sorted(value):
            if name in RESERVED_QUEUES:
                raise ValueError(f"{name!r} is reserved for DAG node jobs; pick another ingest queue name")
            if not QUEUE_NAME_RE.match(name):
                raise ValueError(f"{name!r} is not a valid queue name (lowercase letters, digits, _; max 32)")
        return value

    @field_validator("host_label")
    @classmethod
    def _check_host_label(cls, value: str) -> str:
        if not HOST_LABEL_RE.match(value):
            raise ValueError(f"{value!r} is not a valid host label (letters, digits, '.', '_', '-'; max 63)")
        return value

    @field_validator("schedule_timezone")
    @classmethod
    def _check_timezone(cls, value: str) -> str:
        iana_zone(value)
        return value

    @field_validator("schedule_time_origin")
    @classmethod
    def _aware_origin(cls, value: datetime | None) -> datetime | None:
        return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value

    @model_validator(mode="after")
    def _check_lease(self) -> Settings:
        if self.lease_renew_seconds >= self.lease_seconds:
            raise ValueError(
                f"QW_LEASE_RENEW_SECONDS ({self.lease_renew_seconds:g}) must be shorter than "
                f"QW_LEASE_SECONDS ({self.lease_seconds:g}) or every lease lapses before renewal"
            )
        if self.leader_renew_seconds is not None and self.leader_renew_seconds >= self.leader_lease_seconds:
            raise ValueError(
                f"QW_LEADER_RENEW_SECONDS ({self.leader_renew_seconds:g}) must be shorter than "
                f"QW_LEADER_LEASE_SECONDS ({self.leader_lease_seconds:g}) or the leader loses every lease it holds"
            )
        for kind in ("memory", "gpu", "swap"):
            high, low = getattr(self, f"{kind}_throttle_percent"), getattr(self, f"{kind}_resume_percent")
            if low >= high:
                raise ValueError(f"QW_{kind.upper()}_RESUME_PERCENT ({low:g}) must be below QW_{kind.upper()}_THROTTLE_PERCENT ({high:g}), or the throttle flaps")
        if 0 < self.retain_finished_seconds < self.dedup_window_seconds:
            raise ValueError(
                f"QW_RETAIN_FINISHED_SECONDS ({self.retain_finished_seconds:g}) must cover QW_DEDUP_WINDOW_SECONDS "
                f"({self.dedup_window_seconds:g}): a pruned job no longer holds its dedup key"
            )
        if self.schedule_time_scale != 1.0 and self.schedule_time_origin is None:
            raise ValueError("schedule_time_scale (test-only) needs schedule_time_origin, the instant both clocks agree on")
        return self


def load_settings(**overrides: Any) -> Settings:
    """Build settings from the environment plus explicit overrides, as a ConfigError on bad input."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None


def _describe(exc: ValidationError) -> str:
    problems = []
    for err in exc.errors():
        field = str(err["loc"][0]) if err["loc"] else ""
        name = f"{ENV_PREFIX}{field.upper()}" if field else "settings"
        message = err["msg"].removeprefix("Value error, ")
        got = err.get("input")
        suffix = f" (got {got!r})" if field and not isinstance(got, dict) else ""
        problems.append(f"{name}: {message}{suffix}")
    return "invalid configuration: " + "; ".join(problems)
