"""Revocations the liveness beat heard before their job started here, kept until they lapse."""

from __future__ import annotations

from collections.abc import Iterable


class EarlyRevocations:
    """A cancel can land between a claim's commit and `job_started`: dropping its notice would
    leave the job running until the next renewal, so each is kept for a lease."""

    def __init__(self, keep_seconds: float) -> None:
        self.keep_seconds = keep_seconds
        self._until: dict[int, float] = {}  # job id -> when its note lapses

    def merge(self, revoked: set[int], job_ids: Iterable[int] | None, now: float) -> set[int]:
        """`revoked` and the kept notes that match the running job's `job_ids` (None: no job runs)."""
        early = self._until
        for job_id in revoked:
            early[job_id] = now + self.keep_seconds  # a spurious match later costs one renewal, no more
        for job_id in [j for j, until in early.items() if until <= now]:
            del early[job_id]
        if job_ids is None:
            return revoked
        matched = early.keys() & set(job_ids)
        for job_id in matched:
            del early[job_id]
        return revoked | matched
