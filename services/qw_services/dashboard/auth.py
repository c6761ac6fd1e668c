"""Who may act: a password (or the same value as a bearer token), a signed session, and a CSRF token per session.

Reading needs nothing; with no password configured the dashboard is read-only, so a
dashboard bound to a wider address by mistake still cannot switch workers off.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass

from starlette.requests import Request

SESSION_USER = "user"
SESSION_CSRF = "csrf"
USER_MAX = 40


class ActionRefused(Exception):
    """An action the request may not take; the message says why and what to do."""

    def __init__(self, message: str, status: int = 403) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Auth:
    password: str | None

    @property
    def read_only(self) -> bool:
        return not self.password

    def check_password(self, given: str) -> bool:
        return bool(self.password) and hmac.compare_digest(given.encode(), (self.password or "").encode())

    def user(self, request: Request) -> str | None:
        """The logged-in name, or 'token' for a correct bearer token; None when anonymous."""
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer ") and self.check_password(header[7:].strip()):
            return "token"
        name = request.session.get(SESSION_USER)
        return str(name) if name and not self.read_only else None

    def csrf_token(self, request: Request) -> str:
        token = request.session.get(SESSION_CSRF)
        if not token:
            token = secrets.token_urlsafe(32)
            request.session[SESSION_CSRF] = token
        return str(token)

    def require(self, request: Request, form_token: str | None) -> str:
        """The actor for `requested_by`, or ActionRefused: read-only, not logged in, or a missing/wrong CSRF token."""
        if self.read_only:
            raise ActionRefused("this dashboard is read-only: set QW_DASHBOARD_PASSWORD (or the qw_dashboard_password secret) to allow actions")
        user = self.user(request)
        if user is None:
            raise ActionRefused("log in first: actions need the dashboard password", status=401)
        if user != "token":  # a bearer token is never sent by a browser on its own: no CSRF to fear
            expected = request.session.get(SESSION_CSRF)
            if not expected or not form_token or not hmac.compare_digest(str(expected), form_token):
                raise ActionRefused("the form's CSRF token is missing or stale: reload the page and try again")
        client = request.client.host if request.client else "unknown"
        return f"dashboard:{user}@{client}"[:200]


def clean_user(name: str) -> str:
    """A display name for `requested_by`: printable, short, 'operator' when blank."""
    kept = "".join(ch for ch in name.strip() if ch.isprintable())[:USER_MAX]
    return kept or "operator"
