"""The dashboard's one LISTEN connection, fanned out to every open page as server-sent events.

Browsers never make Postgres work per notification: a `hw_metrics` payload is forwarded as
is, and the workers/queues panels are re-read once per burst of NOTIFYs (or every
`refresh_seconds`, for heartbeat-only changes) and the same HTML sent to every page, so the
database load does not grow with the number of browsers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import psycopg
from psycopg import sql

from queue_workflows import pooler
from queue_workflows.common.health_stamp import HealthStamp

log = logging.getLogger(__name__)

HW_CHANNEL = "hw_metrics"
# Job readiness (one channel per family; 0020's qw_ready_<queue> repeats them), the worker
# switch, the DAG outbox and input steps.
PANEL_CHANNELS = ("ingest_job_ready", "node_job_ready", "qw_worker_control", "qw_dispatch", "qw_input")
CHANNELS = (HW_CHANNEL, *PANEL_CHANNELS)
CLIENT_BUFFER = 256  # events a slow page may lag behind before it is dropped
DEBOUNCE_SECONDS = 0.25  # a burst of NOTIFYs is one re-read
PING_SECONDS = 15.0


def sse(event: str, data: str) -> str:
    """One server-sent event; multi-line data is split into `data:` lines as the format requires."""
    lines = "".join(f"data: {line}\n" for line in data.splitlines() or [""])
    return f"event: {event}\n{lines}\n"


STOP_SECONDS = 5.0
"""How long a shutdown waits for the listener and refresher to end once cancelled."""

class Hub:
    """Holds the LISTEN connection, the latest host snapshots and the subscribed pages' queues."""

    def __init__(self, url: str, render_panels: Callable[[], dict[str, str]], *, refresh_seconds: float = 2.0,
                 latest_hosts: Callable[[], list[dict[str, Any]]] | None = None, health: HealthStamp | None = None) -> None:
        self.url = url
        self.render_panels = render_panels
        self.refresh_seconds = refresh_seconds
        self.latest_hosts = latest_hosts
        self.health = health or HealthStamp(None)
        self.hosts: dict[str, dict[str, Any]] = {}
        self.clients: set[asyncio.Queue[str | None]] = set()
        self.notifications = 0
        self.listening = asyncio.Event()
        self._dirty = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._extra: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        if self.latest_hosts is not None:
            with contextlib.suppress(Exception):  # no database yet: the listener's reconnects report it
                for row in await anyio.to_thread.run_sync(self.latest_hosts):
                    self.hosts[row["host_label"]] = row["payload"]
        self._tasks = [asyncio.create_task(self._listen()), asyncio.create_task(self._refresh())]

    async def stop(self) -> None:
        for q in list(self.clients):
            q.put_nowait(None)
        for task in self._tasks:
            task.cancel()
        if self._tasks:  # bounded: a task stuck in a connect or a worker thread must not hold the server's shutdown
            _, pending = await asyncio.wait(self._tasks, timeout=STOP_SECONDS)
            if pending:
                log.warning("dashboard: %d live task(s) did not stop within %gs; shutting down without them", len(pending), STOP_SECONDS)

    def _broadcast(self, message: str) -> None:
        for q in list(self.clients):
            try:
                q.put_nowait(message)
            except asyncio.QueueFull:  # a page that stopped reading: drop it, its EventSource reconnects
                self.clients.discard(q)
                with contextlib.suppress(asyncio.QueueFull):
                    q.get_nowait()
                    q.put_nowait(None)

    def on_notify(self, channel: str, payload: str) -> None:
        self.notifications += 1
        if channel == HW_CHANNEL:
            try:
                snapshot = json.loads(payload)
                host = str(snapshot["host"])
            except (ValueError, KeyError, TypeError):
                log.warning("ignoring a hw_metrics payload that is not a snapshot: %.80s", payload)
                return
            self.hosts[host] = snapshot
            self._broadcast(sse("host", payload))
            if snapshot.get("truncated") and self.latest_hosts is not None:
                self._spawn(self._complete_host(host))  # the row holds what the 8000-byte NOTIFY dropped
            return
        if channel == "qw_dispatch" or channel == "qw_input":
            self._broadcast(sse("run", payload))
        self._dirty.set()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._extra.add(task)
        task.add_done_callback(self._extra.discard)

    async def _complete_host(self, host: str) -> None:
        assert self.latest_hosts is not None
        try:
            rows = await anyio.to_thread.run_sync(self.latest_hosts)
        except Exception as exc:  # noqa: BLE001 - the trimmed snapshot already went out
            log.warning("dashboard: cannot read host_metrics for %s: %s", host, exc)
            return
        row = next((r for r in rows if r["host_label"] == host), None)
        if row is not None and row["payload"].get("ts") == self.hosts.get(host, {}).get("ts"):
            self.hosts[host] = row["payload"]
            self._broadcast(sse("host", json.dumps(row["payload"])))

    async def _listen(self) -> None:
        delay = 0.2
        while True:
            try:
                if await anyio.to_thread.run_sync(pooler.is_transaction_pooled, self.url):
                    await self._poll_only()
                async with await psycopg.AsyncConnection.connect(self.url, autocommit=True, application_name="qw-dashboard-listen") as conn:
                    for channel in CHANNELS:
                        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                    self.listening.set()
                    delay = 0.2
                    self._dirty.set()  # whatever happened while we were away
                    await self._deliver(conn)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the page outlives a database outage
                self.listening.clear()
                log.warning("dashboard listener: %s; reconnecting in %.1fs", str(exc).strip().splitlines()[0] if str(exc) else exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _poll_only(self) -> None:
        """Behind a transaction-mode pooler a LISTEN would stay on a server connection other clients get next:
        the panels are re-read every `refresh_seconds` instead, and live host metrics wait for that read."""
        log.warning("dashboard: the database URL goes through a transaction-mode pooler, where LISTEN cannot work; "
                    "refreshing the panels every %.1fs instead (docs/poolers.md)", self.refresh_seconds)
        self.listening.set()
        await asyncio.Event().wait()  # until the hub stops: _refresh re-reads on its own timer

    async def _deliver(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Hand on every notification, waiting in the event loop's reader on the socket (psycopg's own wait wakes every 0.1 s)."""
        loop = asyncio.get_running_loop()
        readable = asyncio.Event()
        while True:
            async for note in conn.notifies(timeout=0):
                self.on_notify(note.channel, note.payload)
            readable.clear()
            loop.add_reader(conn.fileno(), readable.set)  # removed again before psycopg next reads: it adds its own
            try:
                await readable.wait()
            finally:
                loop.remove_reader(conn.fileno())

    async def _refresh(self) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._dirty.wait(), timeout=self.refresh_seconds)
            await asyncio.sleep(DEBOUNCE_SECONDS)
            self._dirty.clear()
            if self.listening.is_set():  # what /healthz answers, for the HEALTHCHECK at no cost
                self.health.touch("dashboard listening to Postgres")
            if not self.clients:
                continue
            try:
                panels = await anyio.to_thread.run_sync(self.render_panels)
            except Exception as exc:  # noqa: BLE001
                log.warning("dashboard refresh failed: %s", exc)
                await asyncio.sleep(1.0)
                continue
            for name, html in panels.items():
                self._broadcast(sse(name, html))

    async def stream(self) -> AsyncIterator[str]:
        """One page's events until it goes away: every host first, then whatever arrives, with keep-alive pings."""
        q: asyncio.Queue[str | None] = asyncio.Queue(maxsize=CLIENT_BUFFER)
        self.clients.add(q)
        self._dirty.set()
        try:
            yield "retry: 1000\n\n"
            for snapshot in list(self.hosts.values()):
                yield sse("host", json.dumps(snapshot))
            while True:
                try:
                    message = await asyncio.wait_for(q.get(), timeout=PING_SECONDS)
                except TimeoutError:
                    message = ": ping\n\n"
                if message is None:
                    return
                yield message
        finally:
            self.clients.discard(q)
