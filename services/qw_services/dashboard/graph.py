"""A run's DAG as positioned boxes and edges (a layered layout), drawn by a template as plain SVG.

Drawn on the server so the page needs no graph library: layers by longest path from the
roots, order within a layer by the mean position of a node's parents (one sweep is enough
for the workflows an operator reads), left to right.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 170, 46, 60, 18, 10


@dataclass
class Box:
    id: str
    status: str
    x: int
    y: int
    label: str
    detail: str
    title: str
    href: str | None


@dataclass
class Layout:
    width: int
    height: int
    boxes: list[Box] = field(default_factory=list)
    edges: list[tuple[int, int, int, int]] = field(default_factory=list)


def layers(nodes: list[dict[str, Any]]) -> dict[str, int]:
    """Each node's layer: 0 for a root, else one past its deepest known dependency (unknown deps ignored).

    Iterative (Kahn's order), so a chain of thousands of nodes cannot exhaust the stack; nodes
    left on a cycle (a definition never validated) go one layer past everything else.
    """
    names = [n["id"] for n in nodes]
    known = set(names)
    deps = {n["id"]: {d for d in n["deps"] if d in known and d != n["id"]} for n in nodes}
    children: dict[str, list[str]] = {name: [] for name in names}
    for name, parents in deps.items():
        for parent in parents:
            children[parent].append(name)
    waiting = {name: len(parents) for name, parents in deps.items()}
    ready = [name for name in names if not waiting[name]]
    depth = {name: 0 for name in ready}
    while ready:
        name = ready.pop()
        for child in children[name]:
            depth[child] = max(depth.get(child, 0), depth[name] + 1)
            waiting[child] -= 1
            if not waiting[child]:
                ready.append(child)
    last = max(depth.values(), default=-1) + 1
    return {name: depth.get(name, last) for name in names}


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return f"{seconds:.1f}s" if seconds < 120 else f"{seconds / 60:.1f}m"


def layout(nodes: list[dict[str, Any]]) -> Layout:
    depth = layers(nodes)
    by_layer: dict[int, list[str]] = {}
    for n in nodes:
        by_layer.setdefault(depth[n["id"]], []).append(n["id"])
    spec = {n["id"]: n for n in nodes}
    slot: dict[str, float] = {}
    for level in sorted(by_layer):
        names = by_layer[level]
        if level:
            def mean_parent(name: str) -> float:
                seen = [slot[d] for d in spec[name]["deps"] if d in slot]
                return sum(seen) / len(seen) if seen else 0.0
            names.sort(key=mean_parent)
        for i, name in enumerate(names):
            slot[name] = float(i)
    tallest = max((len(v) for v in by_layer.values()), default=0)
    out = Layout(width=PAD * 2 + len(by_layer) * (BOX_W + GAP_X) - GAP_X if by_layer else 0,
                 height=PAD * 2 + tallest * (BOX_H + GAP_Y) - GAP_Y if tallest else 0)
    pos: dict[str, tuple[int, int]] = {}
    for level, names in by_layer.items():
        offset = (tallest - len(names)) * (BOX_H + GAP_Y) // 2
        for i, name in enumerate(names):
            pos[name] = (PAD + level * (BOX_W + GAP_X), PAD + offset + i * (BOX_H + GAP_Y))
    for n in nodes:
        x, y = pos[n["id"]]
        job = n.get("job") or {}
        attempts = f"try {job['attempts']}/{job['max_attempts']}" if job else ""
        detail = " · ".join(p for p in (n["status"], attempts, _duration(job.get("duration_s"))) if p)
        title = f"{n['id']} ({n.get('kind', 'task')}, {n.get('queue') or '?'})"
        if n.get("waits"):
            title += f": {n['waits']}"
        if job.get("error"):
            title += f"\nerror: {job['error']}"
        href = f"/runs/{n['child_run_id']}" if n.get("child_run_id") else f"/jobs/node:{job['id']}" if job else None
        out.boxes.append(Box(n["id"], n["status"], x, y, n["id"], detail, title, href))
        for dep in n["deps"]:
            if dep in pos:
                px, py = pos[dep]
                out.edges.append((px + BOX_W, py + BOX_H // 2, x, y + BOX_H // 2))
    return out
