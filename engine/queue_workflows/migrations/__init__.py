"""The engine's migration chain, shipped as package data."""

from __future__ import annotations

from pathlib import Path


def dir() -> Path:  # noqa: A001 - the seed's public name
    return Path(__file__).resolve().parent
