"""The demo workflow's nodes: each takes its inputs by name and returns its output as a dict.

fetch -> (count_words, fingerprint, translate [skipped for English], embed [gpu]) -> summarize
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

ARTICLES = {
    "queues": ("en", "Postgres makes a fine queue when claims skip locked rows"),
    "warteschlangen": ("de", "Postgres ist eine gute Warteschlange wenn Zeilen gesperrt uebersprungen werden"),
}


def fetch(topic: str) -> dict[str, Any]:
    language, text = ARTICLES.get(topic, ("en", f"nothing is known about {topic}"))
    return {"text": text, "language": language}


def count_words(text: str) -> dict[str, Any]:
    return {"words": len(text.split())}


def fingerprint(text: str) -> dict[str, Any]:
    return {"sha256": hashlib.sha256(text.encode()).hexdigest()[:16]}


def translate(text: str) -> dict[str, Any]:
    """Skipped for English articles (skip_if); a stand-in for a real translation."""
    return {"english": text.replace("ist eine gute Warteschlange", "is a fine queue")}


def embed(text: str) -> dict[str, Any]:
    """The gpu node (model `demo-embed`); computes a small bag-of-letters vector on the CPU."""
    counts = [text.lower().count(c) for c in "etaoinshr"]
    norm = math.sqrt(sum(c * c for c in counts)) or 1.0
    return {"vector": [round(c / norm, 3) for c in counts]}


def summarize(words: int, sha256: str, vector: list[float], english: str | None = None) -> dict[str, Any]:
    return {"summary": f"{words} words, {sha256}, |v|={len(vector)}", "translated": english is not None}


WORKFLOW = {
    "name": "demo.article",
    "nodes": [
        {"id": "fetch", "call": "qw_demo.nodes:fetch", "inputs": {"topic": {"$from": "topic"}}},
        {"id": "count_words", "call": "qw_demo.nodes:count_words", "deps": ["fetch"], "inputs": {"text": {"$from": "fetch.text"}}},
        {"id": "fingerprint", "call": "qw_demo.nodes:fingerprint", "deps": ["fetch"], "inputs": {"text": {"$from": "fetch.text"}}},
        {"id": "translate", "call": "qw_demo.nodes:translate", "deps": ["fetch"], "inputs": {"text": {"$from": "fetch.text"}},
         "skip_if": {"$eq": [{"$from": "fetch.language"}, "en"]}},
        {"id": "embed", "call": "qw_demo.nodes:embed", "queue": "gpu", "model": "demo-embed", "deps": ["fetch"],
         "inputs": {"text": {"$from": "fetch.text"}}},
        {"id": "summarize", "call": "qw_demo.nodes:summarize", "deps": ["count_words", "fingerprint", "translate", "embed"],
         "inputs": {"words": {"$from": "count_words.words"}, "sha256": {"$from": "fingerprint.sha256"},
                    "vector": {"$from": "embed.vector"}, "english": {"$from": "translate.english", "default": None}}},
    ],
}


def publish(approved: bool, note: str = "") -> dict[str, Any]:
    return {"published": bool(approved), "note": note}


# An input step: the run waits for a person (`qw input RUN approve --value '{"approved": true}'`).
APPROVAL = {
    "name": "demo.approval",
    "nodes": [
        {"id": "approve", "kind": "input"},
        {"id": "publish", "call": "qw_demo.nodes:publish", "deps": ["approve"],
         "inputs": {"approved": {"$from": "approve.approved", "default": False}, "note": {"$from": "approve.note", "default": ""}}},
    ],
}
