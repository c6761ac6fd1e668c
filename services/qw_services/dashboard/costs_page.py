"""The dashboard's Costs page: `qw costs` as a table, charts drawn from its JSON endpoint, and the chargeback CSV.

`/costs` renders the table (readable without JavaScript), `/costs.json` is the same report the
page's charts read (static/costs.js), `/costs.csv` the download; all three take `since`, `until`
and `by` as `qw costs` does, and refuse a bad one with 400 before any read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from queue_workflows.errors import QueueWorkflowsError
from queue_workflows.ops import costs

Read = Callable[[Callable[[], Any]], Awaitable[Any]]
Page = Callable[[Request, str, dict[str, Any]], Response]
Message = Callable[[Request, str, int], Response]


def _params(request: Request) -> dict[str, Any]:
    q = request.query_params
    return {"by": (q.get("by") or "tenant").strip(), "since": (q.get("since") or costs.DEFAULT_SINCE).strip(), "until": (q.get("until") or "").strip() or None}


def _report(params: dict[str, Any]) -> dict[str, Any]:
    return costs.cost_report(by=params["by"], since=params["since"], until=params["until"])


def routes(read: Read, page: Page, message: Message) -> list[Route]:
    async def costs_html(request: Request) -> Response:
        params = _params(request)
        try:
            report = await read(lambda: _report(params))
        except QueueWorkflowsError as exc:
            return message(request, str(exc), 400)
        query = urlencode({k: v for k, v in params.items() if v is not None})
        return page(request, "costs.html", {"report": report, "params": params, "group_by": costs.GROUP_BY, "query": query})

    async def costs_json(request: Request) -> Response:
        params = _params(request)
        try:
            report = await read(lambda: _report(params))
        except QueueWorkflowsError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse(_jsonable(costs.to_json(report)))

    async def costs_csv(request: Request) -> Response:
        params = _params(request)
        try:
            report = await read(lambda: _report(params))
        except QueueWorkflowsError as exc:
            return PlainTextResponse(f"{exc}\n", status_code=400)
        name = f"qw-costs-by-{report['by']}-{report['since']:%Y%m%dT%H%M}-{report['until']:%Y%m%dT%H%M}.csv"
        return Response(costs.to_csv(report), media_type="text/csv; charset=utf-8",
                        headers={"Content-Disposition": f'attachment; filename="{name}"'})

    return [Route("/costs", costs_html), Route("/costs.json", costs_json), Route("/costs.csv", costs_csv)]


def _jsonable(value: Any) -> Any:
    """Decimal-free, NaN-free numbers for the browser's JSON.parse."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and value != value:
        return None
    return value
