"""Tell a transient GPU error from a task's own failure, by the exception's type and text.

Out of memory is transient: another try, after the worker has freed its caches or on a
less loaded device, may well pass. A device error (an illegal address, a failed launch, a
lost GPU) poisons the process's CUDA/HIP context: the job is retried elsewhere and the
worker process must end. Neither is the task's fault, so neither charges an attempt; both
count against the watchdog cap so a job that always breaks the device still ends failed.
"""

from __future__ import annotations

import re
from typing import Literal

GpuErrorKind = Literal["oom", "device"]

_OOM = re.compile(
    r"CUDA out of memory|HIP out of memory|hipErrorOutOfMemory|cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED"
    r"|out of memory on device|OutOfMemoryError",
    re.IGNORECASE,
)
_DEVICE = re.compile(
    r"CUDA error|HIP error|cudaError\w+|hipError\w+|CUDNN_STATUS_\w+|CUBLAS_STATUS_\w+|NVML_ERROR\w*"
    r"|illegal memory access|device-side assert|GPU is lost|unspecified launch failure|ECC error",
)
_OOM_TYPES = frozenset({"OutOfMemoryError", "CudaOutOfMemoryError"})


def output_tail(exc: BaseException, limit: int = 2000) -> str:
    """The end of what a child process printed, where the exception carries it (subprocess.CalledProcessError's
    `stderr`, else `output`): a script that ran out of GPU memory says so there and exits non-zero."""
    for name in ("stderr", "output"):
        value = getattr(exc, name, None)
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if isinstance(value, str) and value.strip():
            return value.strip()[-limit:]
    return ""


def classify(exc: BaseException) -> GpuErrorKind | None:
    """'oom', 'device', or None when the exception is not a GPU error we recognise."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 5:  # a wrapped CUDA error still counts
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    for item in chain:
        try:
            text = f"{type(item).__name__}: {item}\n{output_tail(item)}"
        except Exception:  # noqa: BLE001 - a __str__ that raises is not a GPU error
            continue
        if type(item).__name__ in _OOM_TYPES or _OOM.search(text):
            return "oom"
        if _DEVICE.search(text):
            return "device"
    return None
