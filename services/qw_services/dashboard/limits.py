"""What the dashboard lets strangers cost it: failed authentications per client and overall, and request body size.

A guess takes its token from both buckets *before* it is checked, so parallel guesses cannot
outrun the limit while the failure delay runs; a right answer gives its token back.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)
WINDOW_SECONDS = 60.0
MAX_TRACKED_CLIENTS = 4096  # past this, the least charged are forgotten, down to three quarters
FAILURE_DELAY = 0.5
MAX_BODY_BYTES = 64 * 1024


class Throttled(Exception):
    """Too many failed authentications: from this client, or from everyone at once."""

    def __init__(self, retry_after: float) -> None:
        self.retry_after = max(1, math.ceil(retry_after))
        super().__init__(f"too many failed logins: try again in {self.retry_after} s")


@dataclass
class _Bucket:
    tokens: float
    at: float


class FailureLimiter:
    """Token buckets of failed authentications: `per_client` a minute for each address, `overall` for all of them."""

    def __init__(self, per_client: int, overall: int, *, now_fn: Callable[[], float] = time.monotonic) -> None:
        self.per_client, self.overall, self.now_fn = per_client, overall, now_fn
        self._all = _Bucket(float(overall), now_fn())
        self._clients: dict[str, _Bucket] = {}
        self._throttled: set[str] = set()  # clients already told (logged) they are throttled
        self._all_throttled = False

    def _fill(self, bucket: _Bucket, capacity: int, now: float) -> None:
        bucket.tokens = min(float(capacity), bucket.tokens + (now - bucket.at) * capacity / WINDOW_SECONDS)
        bucket.at = now

    def take(self, client: str) -> None:
        """Reserve one failure for an attempt about to be checked, or Throttled with how long until one is free."""
        now = self.now_fn()
        mine = self._clients.pop(client, None) or _Bucket(float(self.per_client), now)
        self._forget(now)
        self._clients[client] = mine  # most recently seen last, so the oldest go first
        self._fill(mine, self.per_client, now)
        self._fill(self._all, self.overall, now)
        if mine.tokens >= 1 and self._all.tokens >= 1:
            mine.tokens -= 1
            self._all.tokens -= 1
            self._throttled.discard(client)
            self._all_throttled = False
            return
        waits = [(1 - b.tokens) * WINDOW_SECONDS / cap for b, cap in ((mine, self.per_client), (self._all, self.overall)) if b.tokens < 1]
        # One line per throttled client, or one for everyone, per episode: not one per refused guess.
        if mine.tokens < 1 and client not in self._throttled:
            self._throttled.add(client)
            log.warning("dashboard: throttling authentication from %s: %d failures a minute", client, self.per_client)
        elif mine.tokens >= 1 and not self._all_throttled:
            self._all_throttled = True
            log.warning("dashboard: throttling authentication from all clients (latest %s): %d failures a minute overall", client, self.overall)
        raise Throttled(max(waits))

    def give_back(self, client: str) -> None:
        """The attempt was right (or never checked): its reservation is returned."""
        now = self.now_fn()
        if (mine := self._clients.get(client)) is not None:
            self._fill(mine, self.per_client, now)
            mine.tokens = min(float(self.per_client), mine.tokens + 1)
        self._fill(self._all, self.overall, now)
        self._all.tokens = min(float(self.overall), self._all.tokens + 1)

    def _forget(self, now: float) -> None:
        if len(self._clients) <= MAX_TRACKED_CLIENTS:
            return
        for bucket in self._clients.values():
            self._fill(bucket, self.per_client, now)
        # The least charged go first (full ones cost nothing to forget), the throttled last.
        by_charge = sorted(self._clients, key=lambda c: -self._clients[c].tokens)
        for client in by_charge[:len(by_charge) - MAX_TRACKED_CLIENTS * 3 // 4]:
            del self._clients[client]
        self._throttled &= self._clients.keys()


def client_of(request: Request) -> str:
    """The client's address: the peer's, or the one a trusted proxy forwarded (ProxyHeadersMiddleware)."""
    return request.client.host if request.client else "unknown"


@dataclass
class Guard:
    """Charges, logs and delays failed authentications; `reserve` before checking, then `passed` or `failed`."""

    limiter: FailureLimiter
    delay: float = FAILURE_DELAY

    def reserve(self, request: Request) -> None:
        self.limiter.take(client_of(request))

    def passed(self, request: Request) -> None:
        self.limiter.give_back(client_of(request))

    async def failed(self, request: Request, kind: str) -> None:
        log.warning("dashboard: failed authentication (%s) from %s on %s %s", kind, client_of(request), request.method, request.url.path)
        await anyio.sleep(self.delay)  # guessing costs time; other pages are not held up


class BodyLimit:
    """Refuses a request body over `max_bytes` with 413: at once by its Content-Length, else when reading passes it."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = Headers(scope=scope).get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            text = f"the request body is over {self.max_bytes} bytes" if length.isdigit() else "Content-Length is not a number"
            await PlainTextResponse(text, status_code=413 if length.isdigit() else 400)(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:  # a chunked body gives no length up front
                raise HTTPException(413, f"the request body is over {self.max_bytes} bytes")
            return message

        await self.app(scope, limited, send)
