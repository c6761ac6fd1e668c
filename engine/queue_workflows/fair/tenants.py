"""Tenants and their weights: names checked on every enqueue path, weights set at run time, shares shown."""

from __future__ import annotations

import math
import re
from typing import Any

from psycopg.rows import dict_row

from queue_workflows import db
from queue_workflows.common import sqlfile
from queue_workflows.errors import InvalidPayloadError
from queue_workflows.payloads import shown

_FAIR = sqlfile.load("queue_workflows.fair", "fair.sql")

DEFAULT_TENANT = "default"
MAX_WEIGHT = 10_000.0  # the same bound as tenant_weights_weight_range (migration 0042)
_TENANT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,63}$")

__all__ = ["DEFAULT_TENANT", "check_tenant", "check_weight", "clear_tenant_weight", "set_tenant_weight", "tenant_shares"]


def check_tenant(tenant: object) -> str:
    if not isinstance(tenant, str) or not _TENANT_RE.match(tenant):
        raise InvalidPayloadError(f"tenant {shown(tenant)} is invalid: letters, digits and _ . : @ - (max 64, starting with a letter or digit)")
    return tenant


def check_weight(tenant: str, weight: object) -> float:
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight) or not 0 < weight <= MAX_WEIGHT:
        raise InvalidPayloadError(f"tenant {tenant!r}: weight must be a number above 0 and at most {MAX_WEIGHT:g}, not {shown(weight)}")
    return float(weight)


def set_tenant_weight(tenant: str, weight: float, *, conn: db.Conn | None = None) -> None:
    """Serve `tenant` in proportion to `weight` (default 1) in every queue, from the next claim on."""
    params = {"tenant": check_tenant(tenant), "weight": check_weight(tenant, weight)}
    with db.transaction(conn) as c:
        c.execute(_FAIR["set_tenant_weight"], params)


def clear_tenant_weight(tenant: str, *, conn: db.Conn | None = None) -> bool:
    """Back to the default weight 1; False when the tenant had none set."""
    with db.transaction(conn) as c:
        return c.execute(_FAIR["clear_tenant_weight"], {"tenant": check_tenant(tenant)}).rowcount > 0


def tenant_shares(*, queue: str | None = None, conn: db.Conn | None = None) -> list[dict[str, Any]]:
    """Per (queue, tenant): queued, running, weight, served while contended and its share of the queue's."""
    with db.transaction(conn) as c, c.cursor(row_factory=dict_row) as cur:
        return cur.execute(_FAIR["tenant_shares"], {"queue": queue}).fetchall()
