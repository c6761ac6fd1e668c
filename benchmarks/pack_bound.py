"""Yardsticks for gpu_packing.py: a lower bound on any schedule's makespan, and what a simple offline packer reaches.

A job is (GB on each of its devices, devices, seconds). The host has `devices` GPUs of
`capacity_gb` each. Every job needs a model loaded first, and no model can be loaded before the
backlog exists, so nothing runs in the first `load` seconds of any schedule. After that, three
facts each bound the makespan M from below:

- area: the jobs' VRAM-seconds fit in devices x capacity x (M - load);
- big jobs: a job over half a device's capacity shares its device with no other such job, and
  a job larger than what the smallest big job leaves free never runs beside one: so big
  device-seconds / devices + those jobs' VRAM-seconds / (devices x capacity) <= M - load;
- the longest job runs whole: its seconds <= M - load.

The bound uses the raw capacity, no margin, so it holds for every schedule on this hardware,
the engine's included. The packer is first-fit decreasing over time: at each moment, the
waiting jobs, largest VRAM-seconds first, start on the devices with the least room that fits
(room: capacity less margin), at most `slots` at once; zero overhead, one load.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

Job = tuple[float, int, float]  # (GB per device, devices, seconds)


def makespan_lower_bound(jobs: Sequence[Job], *, devices: int, capacity_gb: float, load: float) -> tuple[float, str]:
    """(the bound, which of the three facts gives it)."""
    area = sum(gb * n * s for gb, n, s in jobs) / (devices * capacity_gb)
    bigs = [j for j in jobs if j[0] > capacity_gb / 2]
    big = sum(n * s for _, n, s in bigs) / devices
    left = capacity_gb - min((gb for gb, _, _ in bigs), default=capacity_gb)  # the most a big job leaves free
    medium = sum(gb * n * s for gb, n, s in jobs if left < gb <= capacity_gb / 2) / (devices * capacity_gb)
    longest = max((s for _, _, s in jobs), default=0.0)
    name, value = max((("area", area), ("big jobs", big + medium), ("longest job", longest)), key=lambda kv: kv[1])
    return load + value, name


def first_fit_decreasing(jobs: Sequence[Job], *, devices: int, capacity_gb: float, margin_gb: float, slots: int,
                         load: float) -> float:
    """The makespan of the packer's schedule (starting after one load)."""
    waiting = sorted(jobs, key=lambda j: j[0] * j[1] * j[2], reverse=True)
    room = [capacity_gb - margin_gb] * devices
    running: list[tuple[float, int, list[int], float]] = []  # (end, tiebreak, devices, gb)
    now, end, tick = load, load, 0
    while waiting or running:
        started = []
        for i, (gb, n, s) in enumerate(waiting):
            if len(running) >= slots:
                break
            fits = sorted((room[d], d) for d in range(devices) if room[d] >= gb)[:n]
            if len(fits) < n:
                continue
            picked = [d for _, d in fits]
            for d in picked:
                room[d] -= gb
            tick += 1
            heapq.heappush(running, (now + s, tick, picked, gb))
            end = max(end, now + s)
            started.append(i)
        for i in reversed(started):
            del waiting[i]
        if not running:
            raise ValueError("a job fits no device")
        now, _, freed, gb = heapq.heappop(running)
        for d in freed:
            room[d] += gb
    return end
