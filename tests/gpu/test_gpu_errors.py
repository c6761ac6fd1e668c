"""Transient GPU errors are not the task's fault: out of memory requeues the job once, uncharged
(tests/gpu/test_gpu_learn.py); a device error requeues it and ends the process (exit 78), whose
successor checks the device first, counting against the watchdog cap."""

from __future__ import annotations

import subprocess

import pytest
from procs import Procs, query, service_env, wait_exit, wait_until, wait_workers_ready

from queue_workflows import node_queue
from queue_workflows.gpu.errors import classify


class OutOfMemoryError(RuntimeError):
    """Stands for torch.cuda.OutOfMemoryError, recognised by its name."""


def _wrapped(inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as exc:
            raise ValueError("model step failed") from exc
    except ValueError as outer:
        return outer


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 23.65 GiB total capacity)"), "oom"),
        (OutOfMemoryError("allocation failed"), "oom"),
        (RuntimeError("HIP out of memory. Tried to allocate 512.00 MiB"), "oom"),
        (RuntimeError("CUDA error: an illegal memory access was encountered"), "device"),
        (RuntimeError("HIP error: hipErrorNoDevice"), "device"),
        (RuntimeError("CUDA error: device-side assert triggered"), "device"),
        (_wrapped(RuntimeError("CUDA error: unspecified launch failure")), "device"),
        (ValueError("scenario 7 has no rows"), None),
        (MemoryError(), None),  # host memory: the task's problem, not a GPU's
        (KeyError("cuda"), None),
        # a child script's last words, as subprocess.run(check=True, capture_output=True) keeps them
        (subprocess.CalledProcessError(1, ["python", "train.py"], stderr=b"RuntimeError: CUDA out of memory. Tried to allocate 2 GiB\n"), "oom"),
        (subprocess.CalledProcessError(1, ["python", "train.py"], output="CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate"), "oom"),
        (subprocess.CalledProcessError(1, ["python", "train.py"], stderr=b"ValueError: no rows"), None),
    ],
)
def test_classify(exc, kind):
    assert classify(exc) == kind


@pytest.mark.multiprocess
def test_a_device_error_hands_the_job_on_exits_78_and_flags_the_device(database_url: str, procs: Procs) -> None:
    env = service_env(database_url, QW_HOST_LABEL="gpu-box")
    worker = procs.worker(env, "gpu")
    wait_workers_ready(database_url, [worker])
    job = node_queue.enqueue_node_job("render", "gpu", node_module="qw_test_nodes", inputs={"raise": "CUDA error: an illegal memory access was encountered"}, max_attempts=1)
    assert wait_exit(worker, 20, procs) == 78, procs.logs()
    row = query(database_url, "SELECT status, attempts, watchdog_trips, error FROM workflow_node_jobs WHERE id = %s", (job["id"],))[0]
    assert (row["status"], row["attempts"], row["watchdog_trips"]) == ("queued", 0, 1), row
    assert "exit 78" in row["error"] and "illegal memory access" in row["error"]
    flag = query(database_url, "SELECT device_check_pending FROM worker_controls WHERE host_label = 'gpu-box' AND queue = 'gpu'")
    assert flag and flag[0]["device_check_pending"] is True

    successor = procs.worker(env, "gpu")  # no nvidia-smi here: nothing to check with, so it claims
    wait_until(lambda: query(database_url, "SELECT watchdog_trips FROM workflow_node_jobs WHERE id = %s", (job["id"],))[0]["watchdog_trips"] == 2, timeout=20)
    assert wait_exit(successor, 20, procs) == 78
