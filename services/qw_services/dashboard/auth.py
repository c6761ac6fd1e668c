"""Who may act: a password (or the same value as a bearer token), a signed session, and a CSRF token per session.

Reading needs nothing; with no password configured the dashboard is read-only, so a
dashboard bound to a wider address by mistake still cannot switch workers off. Credentials
are checked only where they are needed (the login form, an action), each check through the
Guard's limits, and an action's credentials before its body is read.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass

from starlette.requests import Request

from .limits import Guard, Throttled, client_of

SESSION_COOKIE = "qw_dashboard"
SESSION_USER = "user"
SESSION_CSRF = "csrf"
USER_MAX = 40


class ActionRefused(Exception):
    """An action the request may not take; the message says why and what to do."""

    def __init__(self, message: str, status: int = 403, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers or {}

    @classmethod
    def throttled(cls, exc: Throttled) -> ActionRefused:
        return cls(str(exc), 429, {"Retry-After": str(exc.retry_after)})


@dataclass(frozen=True)
class Auth:
    password: str | None

    @property
    def read_only(self) -> bool:
        return not self.password

    def check_password(self, given: str) -> bool:
        return bool(self.password) and hmac.compare_digest(given.encode(), (self.password or "").encode())

    def user(self, request: Request) -> str | None:
        """The logged-in name from the signed session; None when anonymous (a page never reads the bearer token)."""
        name = request.session.get(SESSION_USER)
        return str(name) if name and not self.read_only else None

    def csrf_token(self, request: Request) -> str:
        token = request.session.get(SESSION_CSRF)
        if not token:
            token = secrets.token_urlsafe(32)
            request.session[SESSION_CSRF] = token
        return str(token)

    async def authenticate(self, request: Request, guard: Guard) -> str:
        """Who acts ('token' for a right bearer token), from the headers alone, or ActionRefused (401/403/429)."""
        if self.read_only:
            raise ActionRefused("this dashboard is read-only: set QW_DASHBOARD_PASSWORD (or the qw_dashboard_password secret) to allow actions")
        header = request.headers.get("authorization")
        user = self.user(request)
        if header is None and user is not None:
            return user
        kind = "bearer token" if header is not None else "session cookie"
        if header is None and (SESSION_COOKIE not in request.cookies or request.session):  # a cookie that verified
            raise ActionRefused("log in first: actions need the dashboard password", status=401)
        try:  # a bearer token, or a session cookie that does not verify (forged, or signed before a restart)
            guard.reserve(request)
        except Throttled as exc:
            raise ActionRefused.throttled(exc) from None
        if header is not None and header[:7].lower() == "bearer " and self.check_password(header[7:].strip()):
            guard.passed(request)
            return "token"
        await guard.failed(request, kind)
        if header is not None:
            raise ActionRefused("the Authorization header is not the dashboard password as a bearer token", status=401)
        raise ActionRefused("log in first: the session is not valid (the dashboard restarted, or it was altered)", status=401)

    def actor(self, request: Request, user: str, form_token: str | None) -> str:
        """The actor for `requested_by` once the form is read, or ActionRefused for a missing/wrong CSRF token."""
        if user != "token":  # a bearer token is never sent by a browser on its own: no CSRF to fear
            expected = request.session.get(SESSION_CSRF)
            if not expected or not form_token or not hmac.compare_digest(str(expected), form_token):
                raise ActionRefused("the form's CSRF token is missing or stale: reload the page and try again")
        return f"dashboard:{user}@{client_of(request)}"[:200]


def clean_user(name: str) -> str:
    """A display name for `requested_by`: printable, short, 'operator' when blank."""
    kept = "".join(ch for ch in name.strip() if ch.isprintable())[:USER_MAX]
    return kept or "operator"
