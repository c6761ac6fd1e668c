"""The framework's own peak: where a job ran torch on CUDA, its allocator's peak reserved memory since the
job's start counts beside NVML's samples, and the larger is stored; here with a fake torch and a fake NVML
at the process boundary (tests/support/fake_torch, tests/support/fake_nvml on the worker's PYTHONPATH)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from procs import Procs, log_text, query, wait_until
from test_gpu_memory import gpu_worker_env, one_device, status_of

from queue_workflows import node_queue
from queue_workflows.worker.framework_peak import framework_peak_bytes, framework_reset_peak
from queue_workflows.worker.vram_peak import PeakSampler

FAKE_TORCH_DIR = Path(__file__).resolve().parents[1] / "support" / "fake_torch"
_spec = importlib.util.spec_from_file_location("fake_torch", FAKE_TORCH_DIR / "torch.py")
assert _spec is not None and _spec.loader is not None
fake_torch = importlib.util.module_from_spec(_spec)  # its resets() helper; this process's `import torch` stays the real one
_spec.loader.exec_module(fake_torch)

GIB = 1 << 30


def _peak(database_url: str, job: int) -> int | None:
    return query(database_url, "SELECT peak_vram_bytes FROM workflow_node_jobs WHERE id = %s", (job,))[0]["peak_vram_bytes"]


@pytest.mark.multiprocess
def test_the_stored_peak_is_torchs_reserved_peak_where_it_is_above_nvmls(database_url: str, procs: Procs, tmp_path: Path) -> None:
    state = one_device(tmp_path / "nvml.json", used_gb=1.0)
    torch_state = str(tmp_path / "torch.json")
    env = gpu_worker_env(database_url, state, QW_GPU_VRAM_SAMPLE_SECONDS="0.05", QW_FAKE_TORCH=torch_state)
    env["PYTHONPATH"] = os.pathsep.join([str(FAKE_TORCH_DIR), env["PYTHONPATH"]])
    worker = procs.worker(env, "gpu")

    # A burst between samples: NVML saw 1 GB, torch's allocator reserved 3 GB (of which 2 GB were allocated).
    burst = node_queue.enqueue_node_job("burst", "gpu", node_module="qw_gpu_nodes", inputs={
        "torch_peak": {"reserved": 3 * GIB, "allocated": 2 * GIB}, "vram_wave": [GIB, 0]})["id"]
    wait_until(lambda: status_of(database_url, burst) == "completed", timeout=30, what="the burst job")
    assert _peak(database_url, burst) == 3 * GIB, log_text(worker)[-2000:]

    # NVML above torch (the CUDA context is NVML's alone): NVML's figure, and torch's counts from this job's
    # start, not the 3 GB the worker's allocator reached in the job before.
    steady = node_queue.enqueue_node_job("steady", "gpu", node_module="qw_gpu_nodes", inputs={
        "torch_peak": {"reserved": GIB // 2, "allocated": GIB // 4}, "vram_wave": [2 * GIB, 0]})["id"]
    wait_until(lambda: status_of(database_url, steady) == "completed", timeout=30, what="the steady job")
    assert _peak(database_url, steady) == 2 * GIB, log_text(worker)[-2000:]
    assert fake_torch.resets(torch_state) == 1  # at the second job's start: torch was not imported before the first


def test_on_cpu_torch_the_framework_peak_reads_nothing_and_makes_no_cuda_context():
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[torch]')")
    if torch.cuda.is_available():
        pytest.skip("this torch has a CUDA device: the no-op path is CPU torch's")
    framework_reset_peak()
    assert framework_peak_bytes() is None  # unknown, not 0: a CPU job's peak VRAM stays empty
    sampler = PeakSampler(lambda: None, interval=0.01)  # the default framework probes
    sampler.start()
    assert float(torch.ones(1000).sum()) == 1000.0
    assert sampler.stop() is None
    assert not torch.cuda.is_initialized()
