"""The demo workflow's nodes: each takes its inputs by name and returns its output as a dict.

fetch -> (count_words, fingerprint, translate [skipped for English], embed [gpu]) -> summarize
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

from queue_workflows import model_registry

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


LETTERS = "etaoinshr"


def load_demo_embed() -> dict[str, Any]:
    """The `demo-embed` model: real work and real memory on the CPU (a GPU box would load weights).

    About 200 MB of "weights" and a second or so of hashing them, so `qw dev` shows what a
    warm model saves: the first embed pays the load, later ones are hits (`qw job ID`).
    """
    weights = bytearray(200 * 1024 * 1024)
    digest = hashlib.sha256()
    for offset in range(0, len(weights), 16 * 1024 * 1024):
        digest.update(memoryview(weights)[offset:offset + 16 * 1024 * 1024])
    scale = 1 + int(digest.hexdigest()[:2], 16) % 3
    return {"weights": weights, "scale": scale}


def register_models() -> None:
    model_registry.register(model_registry.ModelSpec("demo-embed", load_demo_embed, est_vram_gb=0.2))


def embed(text: str) -> dict[str, Any]:
    """The gpu node (model `demo-embed`): a bag-of-letters vector, weighted by the loaded model."""
    model = model_registry.current()
    scale = model["scale"] if model else 1
    counts = [text.lower().count(c) * scale for c in LETTERS]
    norm = math.sqrt(sum(c * c for c in counts)) or 1.0
    return {"vector": [round(c / norm, 3) for c in counts], "warm_model": model is not None}


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
