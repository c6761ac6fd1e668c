"""The dashboard's ASGI app: pages, the event stream, login and the actions.

`create_app()` reads the one settings model; the live hub starts with the app and holds the
only LISTEN connection, page reads go through the engine's pool. Every request first passes
the Host check (DNS rebinding), the forwarded-address rule and the body cap.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import psycopg
from psycopg_pool import PoolTimeout
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from queue_workflows import config
from queue_workflows.common.health_stamp import HealthStamp
from queue_workflows.errors import DatabaseUnreachableError, InvalidPayloadError, QueueWorkflowsError, SchemaNotReadyError
from queue_workflows.ops import admin

from . import actions, costs_page, views
from .auth import SESSION_COOKIE, SESSION_CSRF, ActionRefused, Auth, clean_user
from .limits import BodyLimit, FailureLimiter, Guard, Throttled
from .live import Hub

log = logging.getLogger(__name__)
STATIC = Path(__file__).with_name("static")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


class Unavailable(Exception):
    """Postgres did not answer a page's read: the page says so (503) rather than failing with a traceback."""


def _optional(value: str | None) -> str | None:
    return value.strip() or None if value is not None else None


def allowed_hosts(configured: tuple[str, ...], addr: str) -> list[str]:
    """The Host names answered: those configured, else the loopback names and the address it is bound to."""
    if configured:
        return list(configured)
    bound = [] if addr in ("", "0.0.0.0", "::") else [f"[{addr}]" if ":" in addr else addr.lower()]
    return list(dict.fromkeys([*LOOPBACK_HOSTS, *bound]))


def create_app(*, password: str | None = None, refresh_seconds: float | None = None,
               now_fn: Callable[[], float] = time.monotonic, failure_delay: float | None = None) -> Starlette:
    settings = config.current().settings
    if password is None and settings.dashboard_password is not None:
        password = settings.dashboard_password.get_secret_value()
    auth = Auth(password or None)
    guard = Guard(FailureLimiter(settings.dashboard_auth_failures_per_minute, settings.dashboard_auth_failures_total_per_minute, now_fn=now_fn))
    if failure_delay is not None:
        guard.delay = failure_delay
    templates = views.make_templates()
    hub = Hub(config.current().database_url(), lambda: views.panels(templates),
              refresh_seconds=refresh_seconds or settings.dashboard_refresh_seconds, latest_hosts=views.latest_hosts,
              health=HealthStamp(settings.health_file))

    def page(request: Request, name: str, context: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None) -> Response:
        user = auth.user(request)
        base = {"user": user, "read_only": auth.read_only, "csrf": auth.csrf_token(request), "nav": name}
        response = templates.TemplateResponse(request, name, {**base, **context}, status_code=status)
        response.headers.update({**SECURITY_HEADERS, **(headers or {})})
        return response

    def message(request: Request, text: str, status: int, headers: dict[str, str] | None = None) -> Response:
        if request.headers.get("hx-request"):
            kind = "ok" if status < 400 else "error"
            return HTMLResponse(templates.env.get_template("_flash.html").render(kind=kind, text=text), status_code=status, headers=headers)
        return page(request, "message.html", {"text": text, "ok": status < 400}, status, headers)

    async def read(fn: Callable[[], Any]) -> Any:
        try:
            return await anyio.to_thread.run_sync(fn)
        except (DatabaseUnreachableError, SchemaNotReadyError, psycopg.OperationalError, PoolTimeout) as exc:
            raise Unavailable(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__) from exc

    async def unavailable(request: Request, exc: Exception) -> Response:
        return message(request, f"the database is not answering: {exc}", 503)

    async def index(request: Request) -> Response:
        context = await read(lambda: {**views.workers_context(), **views.queues_context(), **views.tenants_context()})
        return page(request, "index.html", {**context, "hosts": list(hub.hosts.values())})

    async def runs(request: Request) -> Response:
        status = _optional(request.query_params.get("status"))
        try:
            context = await read(lambda: views.runs_context(status))
        except QueueWorkflowsError as exc:
            return message(request, str(exc), 400)
        return page(request, "_runs_table.html" if request.url.path.endswith("/live") else "runs.html", context)

    def _run_id(request: Request) -> int:
        raw = request.path_params["run_id"]
        if not raw.isdigit() or len(raw) > 18:
            raise InvalidPayloadError(f"run id must be a positive integer, not {raw[:40]!r}")
        return int(raw)

    async def run(request: Request) -> Response:
        try:
            run_id = _run_id(request)
            context = await read(lambda: views.run_context(run_id))
        except QueueWorkflowsError as exc:
            return message(request, str(exc), 400)
        if context is None:
            return message(request, f"no workflow run {run_id}", 404)
        name = "_run_live.html" if request.url.path.endswith("/live") else "run.html"
        return page(request, name, context)

    async def jobs(request: Request) -> Response:
        q = request.query_params
        args = (_optional(q.get("queue")), _optional(q.get("status")), _optional(q.get("task")))
        try:
            context = await read(lambda: views.jobs_context(*args))
        except QueueWorkflowsError as exc:
            return message(request, str(exc), 400)
        return page(request, "jobs.html", context)

    async def job(request: Request) -> Response:
        ref = request.path_params["ref"]
        try:
            context = await read(lambda: views.job_context(ref))
        except admin.JobNotFoundError as exc:
            return message(request, str(exc), 404)
        except QueueWorkflowsError as exc:
            return message(request, str(exc), 400)
        return page(request, "job.html", context)

    async def events(request: Request) -> Response:
        return StreamingResponse(hub.stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def healthz(request: Request) -> Response:
        """200 while the hub holds its LISTEN connection (a container HEALTHCHECK), else 503."""
        listening = hub.listening.is_set()
        return PlainTextResponse("ok\n" if listening else "not listening to Postgres\n", status_code=200 if listening else 503)

    async def login(request: Request) -> Response:
        if request.method == "GET":
            return page(request, "login.html", {"error": None})
        if auth.read_only:
            return page(request, "login.html", {"error": "this dashboard is read-only: no password is configured"}, 403)

        def expired() -> Response:
            return page(request, "login.html", {"error": "the form expired: try again"}, 403)

        if not request.session.get(SESSION_CSRF):  # no login page was loaded: refused before the body is read
            return expired()
        try:
            guard.reserve(request)
        except Throttled as exc:
            return page(request, "login.html", {"error": str(exc)}, 429, {"Retry-After": str(exc.retry_after)})
        try:
            form = await request.form()
        except BaseException:
            guard.passed(request)  # nothing was checked
            raise
        if not secrets.compare_digest(str(form.get("csrf") or ""), auth.csrf_token(request)):
            guard.passed(request)
            return expired()
        if not auth.check_password(str(form.get("password") or "")):
            await guard.failed(request, "password")
            return page(request, "login.html", {"error": "wrong password"}, 401)
        guard.passed(request)
        request.session.clear()
        request.session["user"] = clean_user(str(form.get("name") or ""))
        return RedirectResponse("/", status_code=303)

    async def logout(request: Request) -> Response:
        if not request.session:
            return RedirectResponse("/", status_code=303)
        form = await request.form()
        if secrets.compare_digest(str(form.get("csrf") or ""), auth.csrf_token(request)):
            request.session.clear()
        return RedirectResponse("/", status_code=303)

    def action(do: Callable[[Request, Any, str], str]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            origin = request.headers.get("origin")
            try:
                if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host"):
                    raise ActionRefused(f"refused a cross-site request from {origin[:80]}")
                user = await auth.authenticate(request, guard)  # before the body: a stranger's upload is never read
                form = await request.form()
                actor = auth.actor(request, user, request.headers.get("x-csrf-token") or str(form.get("csrf") or "") or None)
                text = await read(lambda: do(request, form, actor))
            except ActionRefused as exc:
                return message(request, str(exc), exc.status, exc.headers)
            except (QueueWorkflowsError, LookupError, ValueError) as exc:
                return message(request, str(exc).strip().splitlines()[0] if str(exc) else type(exc).__name__, 400)
            log.info("dashboard action by %s: %s", actor, text)
            return message(request, text, 200)
        return endpoint

    routes = [
        Route("/", index),
        Route("/runs", runs),
        Route("/runs/live", runs),
        Route("/runs/{run_id}", run),
        Route("/runs/{run_id}/live", run),
        Route("/jobs", jobs),
        Route("/jobs/{ref}", job),
        *costs_page.routes(read, page, message),
        Route("/events", events),
        Route("/healthz", healthz),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/actions/worker", action(lambda r, f, a: actions.switch_worker(f, a)), methods=["POST"]),
        Route("/runs/{run_id}/cancel", action(lambda r, f, a: actions.cancel(_run_id(r), f, a)), methods=["POST"]),
        Route("/runs/{run_id}/restart", action(lambda r, f, a: actions.restart(_run_id(r), a)), methods=["POST"]),
        Route("/runs/{run_id}/input", action(lambda r, f, a: actions.give_input(_run_id(r), f, a)), methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await hub.start()
        try:
            yield
        finally:
            await hub.stop()

    hosts = allowed_hosts(settings.dashboard_allowed_hosts, settings.dashboard_addr)
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={Unavailable: unavailable}, middleware=[
        # A page in the operator's browser can point its own name at 127.0.0.1 (DNS rebinding): only known names are answered.
        Middleware(TrustedHostMiddleware, allowed_hosts=hosts),
        Middleware(ProxyHeadersMiddleware, trusted_hosts=list(settings.dashboard_trusted_proxies)),
        Middleware(BodyLimit),
        Middleware(GZipMiddleware, minimum_size=1024),  # leaves text/event-stream alone
        Middleware(SessionMiddleware, secret_key=secrets.token_urlsafe(32), session_cookie=SESSION_COOKIE,
                   same_site="strict", max_age=12 * 3600),
    ])
    app.state.hub = hub
    app.state.auth = auth
    app.state.guard = guard
    app.state.allowed_hosts = hosts
    return app
