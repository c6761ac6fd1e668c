"""A stand-in for `torch` on CUDA that a real worker process imports when this folder is on its PYTHONPATH.

Only what the engine asks of torch (worker/framework_peak.py, gpu/cache.py): one CUDA device,
already initialised, whose allocator peaks live in the JSON file named by QW_FAKE_TORCH,
{"reserved": bytes, "allocated": bytes}, re-read on every call, so a job scripts them (`reach`).
`reset_peak_memory_stats` zeroes both (nothing is held between jobs here) and appends a line
to `<file>.resets`.
"""

from __future__ import annotations

import json
import os
from typing import Any

__version__ = "0.0+fake"


def _path() -> str:
    return os.environ["QW_FAKE_TORCH"]


def _peaks() -> dict[str, Any]:
    try:
        with open(_path()) as f:
            return json.load(f)
    except FileNotFoundError:
        return {"reserved": 0, "allocated": 0}


class _Cuda:
    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def reset_peak_memory_stats(device: int = 0) -> None:
        _write(_path(), {"reserved": 0, "allocated": 0})
        with open(_path() + ".resets", "a") as f:
            f.write(f"{device}\n")

    @staticmethod
    def max_memory_reserved(device: int = 0) -> int:
        return int(_peaks()["reserved"])

    @staticmethod
    def max_memory_allocated(device: int = 0) -> int:
        return int(_peaks()["allocated"])

    @staticmethod
    def empty_cache() -> None:
        pass


cuda = _Cuda()


# -- the test's side (not part of torch) ------------------------------------------------------


def reach(path: str, *, reserved: int, allocated: int) -> None:
    """The job's allocator reaches these figures: each peak becomes the higher of it and the figure."""
    peaks = _peaks()
    _write(path, {"reserved": max(reserved, int(peaks["reserved"])), "allocated": max(allocated, int(peaks["allocated"]))})


def _write(path: str, peaks: dict[str, int]) -> None:
    """A rename, so a reader never sees half a file."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(peaks, f)
    os.replace(tmp, path)


def resets(path: str) -> int:
    """Peak resets so far."""
    try:
        with open(path + ".resets") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0
