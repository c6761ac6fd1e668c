"""The claim statements, composed from named SQL (worker/worker.sql, gpu/claim.sql) and fixed fragments only."""

from __future__ import annotations

from functools import cache

from psycopg import sql

from queue_workflows.common import sqlfile
from queue_workflows.common.sqlfile import JobTable

__all__ = ["JobTable", "claim_query"]

_WORKER = sqlfile.load("queue_workflows.worker", "worker.sql")
_GPU = sqlfile.load("queue_workflows.gpu", "claim.sql")
_FAIR = sqlfile.load("queue_workflows.fair", "fair.sql")

PRIORITY_ORDER = {
    "highest_first": sql.SQL("priority DESC"),
    "lowest_first": sql.SQL("priority ASC"),
}
# Warm-model affinity: a job for the model this worker already holds sorts first.
MODEL_AFFINITY = sql.SQL("(required_model IS NOT DISTINCT FROM %(current_model)s) DESC")
# Then any other model it holds warm.
WARM_AFFINITY = sql.SQL("coalesce(required_model = ANY(%(loaded_models)s::text[]), false) DESC")
# A gpu worker's plan (gpu_claim_plan): first the models only it could run, even over its warm
# model; then, for a job it would have to load a model for, that model's rank in the plan.
SOLE_FIRST = sql.SQL("coalesce(required_model = ANY((SELECT p.sole FROM plan AS p)::text[]), false) DESC")
COLD_RANK = sql.SQL("array_position((SELECT p.ranked FROM plan AS p), required_model) ASC NULLS FIRST")
CREATED_ORDER = sql.SQL("id ASC")
# A model's next job in the gpu plan, after `required_model`: the claim order, then the oldest.
# workflow_node_jobs_model_claim_idx serves highest_first as it is; lowest_first sorts each model's jobs.
HEAD_ORDER = {
    "highest_first": sql.SQL("q.priority DESC, q.id"),
    "lowest_first": sql.SQL("q.priority ASC, q.id"),
}
# Fair share (fair/fair.sql): a band's priority aged by one level per QW_CLAIM_AGING_SECONDS its
# oldest job has waited (0: no aging), in the claim order's direction.
_AGE = "CASE WHEN %(aging_seconds)s::float8 > 0 THEN floor(extract(epoch FROM now() - bd.created_at) / %(aging_seconds)s::float8) ELSE 0 END"
BAND_ORDER = {
    "highest_first": sql.SQL("bd.priority + " + _AGE + " DESC"),
    "lowest_first": sql.SQL("bd.priority - " + _AGE + " ASC"),
}


# A one-job claim's row becomes its band's floor in the session (fair_bands); a routed gpu claim keeps none.
NOTE_FLOOR = "qw_claim_floor_note({table_name}, claimed.queue, claimed.tenant, claimed.priority, claimed.id)"


@cache
def fair_fragments(table: JobTable, claim_order: str) -> dict[str, sql.Composable]:
    """`{fair}`, `{bands}` and `{charge}` of a claim on `table`: its tenant order, a tenant's bands, its charge (fair/fair.sql)."""
    return {
        "fair": sql.SQL(_FAIR["fair_order"]).format(table=sql.Identifier(table)),
        "bands": sql.SQL(_FAIR["fair_bands"]).format(table=sql.Identifier(table), table_name=sql.Literal(table),
                                                     band_order=BAND_ORDER[claim_order]),
        "charge": sql.SQL(_FAIR["fair_charge"]),
    }


@cache
def claim_query(table: JobTable, claim_order: str, with_affinity: bool) -> sql.Composed:
    """The claim statement; ORDER BY is assembled only from the fixed fragments above."""
    if claim_order not in PRIORITY_ORDER:
        raise ValueError(f"claim order must be one of {sorted(PRIORITY_ORDER)}, not {claim_order!r}")
    order: list[sql.Composable] = [PRIORITY_ORDER[claim_order]]
    plan: sql.Composable = sql.SQL("")
    routing: sql.Composable = sql.SQL("")
    reserve: sql.Composable = sql.SQL("")
    if with_affinity:  # a gpu worker: its sole models, then warm ones, then what its plan allows (gpu_routing)
        plan = sql.SQL(_GPU["gpu_claim_plan"] + "\n").format(table=sql.Identifier(table), table_all=sql.Identifier(f"{table}_all"),
                                                           head_order=HEAD_ORDER[claim_order])
        order += [SOLE_FIRST, MODEL_AFFINITY, WARM_AFFINITY, COLD_RANK]
        routing = sql.SQL(_GPU["gpu_routing"])
        reserve = sql.SQL(_GPU["gpu_reserve"] + "\n")
    order.append(CREATED_ORDER)
    note = sql.SQL("true") if with_affinity else sql.SQL(NOTE_FLOOR).format(table_name=sql.Literal(table))
    return sql.SQL(_WORKER["claim_job"]).format(
        plan=plan, table=sql.Identifier(table), order_by=sql.SQL(", ").join(order), routing=routing, reserve=reserve, note=note,
        clear_unassignable=sqlfile.clear_unassignable(table), **fair_fragments(table, claim_order),
    )
