"""GPU memory by default: a gpu worker's throttle reads the GPU through NVML (or amdsmi) where either
works, and a job's peak VRAM is sampled through the job, here with a fake NVML at the process boundary
(tests/support/fake_nvml on the worker's PYTHONPATH) whose per-process memory a job moves."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from procs import Procs, log_text, query, service_env, wait_until

from queue_workflows import node_queue
from queue_workflows.control import throttle
from queue_workflows.gpu.memory import GpuMemory
from queue_workflows.worker.vram_peak import PeakSampler, is_own

FAKE_NVML_DIR = Path(__file__).resolve().parents[1] / "support" / "fake_nvml"
sys.path.insert(0, str(FAKE_NVML_DIR))
import pynvml as fake_nvml  # noqa: E402 - the fake's own helpers (write_state, queries), not the real binding

sys.path.remove(str(FAKE_NVML_DIR))
sys.modules.pop("pynvml", None)  # this process's `import pynvml` stays the real one (or none)

GIB = 1 << 30


def one_device(path: Path, *, used_gb: float, total_gb: float = 24, init_error: str | None = None) -> str:
    fake_nvml.write_state(str(path), {"init_error": init_error, "devices": [
        {"name": "Fake A10", "uuid": "GPU-fake-0", "total": int(total_gb * GIB), "base_used": int(used_gb * GIB), "procs": {}}]})
    return str(path)


def gpu_worker_env(database_url: str, state: str, **overrides: str) -> dict[str, str]:
    env = service_env(database_url, QW_APP="qw_gpu_nodes", QW_HEARTBEAT_SECONDS="0.2", QW_MEMORY_CHECK_SECONDS="0.2",
                      QW_FAKE_NVML=state, **overrides)
    env["PYTHONPATH"] = os.pathsep.join([str(FAKE_NVML_DIR), env["PYTHONPATH"]])
    return env


def state_of(database_url: str, pid: int) -> str | None:
    rows = query(database_url, "SELECT state FROM worker_heartbeats WHERE pid = %s", (pid,))
    return rows[0]["state"] if rows else None


def status_of(database_url: str, job_id: int) -> str:
    return query(database_url, "SELECT status FROM workflow_node_jobs WHERE id = %s", (job_id,))[0]["status"]


# The throttle -------------------------------------------------------------------------------


@pytest.mark.multiprocess
def test_a_fifo_gpu_worker_stops_claiming_while_its_gpu_memory_is_full(database_url: str, procs: Procs, tmp_path: Path) -> None:
    state = one_device(tmp_path / "nvml.json", used_gb=22.0)  # 92 % > 85 %
    # RAM and swap marks out of reach: only the GPU reading may throttle, whatever this host's memory is doing.
    env = gpu_worker_env(database_url, state, QW_MEMORY_THROTTLE_PERCENT="100", QW_MEMORY_RESUME_PERCENT="99.9",
                         QW_SWAP_THROTTLE_PERCENT="100", QW_SWAP_RESUME_PERCENT="99.9", QW_GPU_ROUTING="fifo")
    worker = procs.worker(env, "gpu")
    wait_until(lambda: state_of(database_url, worker.pid) == "throttled", timeout=20, what="the worker to throttle on GPU memory")
    assert "memory pressure (GPU memory 92% > 85%)" in log_text(worker)
    job = node_queue.enqueue_node_job("n", "gpu", node_module="qw_gpu_nodes")["id"]
    one_device(tmp_path / "nvml.json", used_gb=12.0)  # 50 % < 75 %: claiming again
    wait_until(lambda: status_of(database_url, job) == "completed", timeout=20, what="the job to run once GPU memory eased")
    assert "memory pressure eased" in log_text(worker)


@pytest.mark.multiprocess
def test_a_worker_admitting_by_vram_runs_what_fits_on_a_full_device_without_throttling(database_url: str, procs: Procs, tmp_path: Path) -> None:
    # Packing keeps devices full on purpose: the claim's admission reads what is free, so a throttle on
    # how full the device is would only hold the packed device's workers back (1.8x in gpu_packing.py).
    state = one_device(tmp_path / "nvml.json", used_gb=22.0)  # 92 % full, 2 GB free
    env = gpu_worker_env(database_url, state, QW_MEMORY_THROTTLE_PERCENT="100", QW_MEMORY_RESUME_PERCENT="99.9",
                         QW_SWAP_THROTTLE_PERCENT="100", QW_SWAP_RESUME_PERCENT="99.9")
    worker = procs.worker(env, "gpu")
    fits = node_queue.enqueue_node_job("n", "gpu", node_module="qw_gpu_nodes", vram_gb=1.0)["id"]
    wait_until(lambda: status_of(database_url, fits) == "completed", timeout=20, what="a 1 GB job to run in the 2 GB left")
    assert "memory pressure" not in log_text(worker) and state_of(database_url, worker.pid) != "throttled", log_text(worker)[-2000:]


@pytest.mark.multiprocess
def test_a_broken_nvml_leaves_the_worker_running_on_ram_and_swap(database_url: str, procs: Procs, tmp_path: Path) -> None:
    state = one_device(tmp_path / "nvml.json", used_gb=23.0, init_error="Driver Not Loaded")
    worker = procs.worker(gpu_worker_env(database_url, state), "gpu")
    job = node_queue.enqueue_node_job("n", "gpu", node_module="qw_gpu_nodes")["id"]
    wait_until(lambda: status_of(database_url, job) == "completed", timeout=20, what="the job to run")
    row = query(database_url, "SELECT peak_vram_bytes FROM workflow_node_jobs WHERE id = %s", (job,))[0]
    assert row["peak_vram_bytes"] is None  # nothing could be asked: unknown, not zero
    text = log_text(worker)
    assert worker.poll() is None and "Traceback" not in text and "memory probe failed" not in text, text


def test_the_default_probe_reads_the_fullest_device_less_its_own_memory_and_only_for_a_gpu_worker():
    me = os.getpid()
    devices = {0: (6 * GIB, 24 * GIB, {me + 1: 2 * GIB}), 1: (20 * GIB, 24 * GIB, {me: 18 * GIB, me + 1: 2 * GIB})}
    nvml = SimpleNamespace(
        nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: len(devices), nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=devices[h][0], total=devices[h][1]),
        nvmlDeviceGetComputeRunningProcesses=lambda h: [SimpleNamespace(pid=p, usedGpuMemory=b) for p, b in devices[h][2].items()])
    memory = GpuMemory(lambda: nvml, missing)
    assert memory.device_percent() == pytest.approx(100 * 20 / 24)
    assert memory.device_percent(besides={me}) == pytest.approx(100 * 6 / 24)  # its own 18 GB on device 1 is no pressure
    assert throttle.current_probe(gpu=False) is throttle.psutil_probe  # a cpu worker is never held back by a full GPU
    assert throttle.current_probe(gpu=True) is throttle.gpu_probe
    try:
        custom = lambda: throttle.MemoryReadings(1, 1, 99)  # noqa: E731
        throttle.set_memory_probe(custom)
        assert throttle.current_probe(gpu=True) is custom and throttle.current_probe(gpu=False) is custom
    finally:
        throttle.set_memory_probe(None)


def missing():
    raise ModuleNotFoundError("No module named 'x'")


def test_amdsmi_answers_where_nvml_cannot():
    def no_driver():
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    me = os.getpid()
    amd = SimpleNamespace(
        amdsmi_init=lambda: None, amdsmi_get_processor_handles=lambda: ["h0"],
        amdsmi_get_gpu_vram_usage=lambda h: {"vram_used": 6144, "vram_total": 8192},
        amdsmi_get_gpu_process_list=lambda h: [{"pid": me, "memory_usage": {"vram_mem": 3 * GIB}}, {"pid": me + 1, "mem": GIB}])
    memory = GpuMemory(no_driver, lambda: amd)
    assert memory.device_percent() == 75.0
    assert memory.device_percent(besides={me}) == 100 * (6144 - 3072) / 8192
    assert memory.process_bytes({me}) == 3 * GIB
    assert memory.library() == ("amdsmi", amd)


def test_neither_library_is_none_and_a_hanging_one_is_abandoned_at_its_deadline():
    assert GpuMemory(missing, missing).device_percent() is None
    gate = threading.Event()
    stuck = SimpleNamespace(nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: gate.wait(30) and 0)
    memory = GpuMemory(lambda: stuck, missing, timeout=0.2)
    try:
        assert memory.device_percent() is None
        assert memory.process_bytes({os.getpid()}) is None  # refused at once while the first call is stuck
    finally:
        gate.set()


# The job's peak -----------------------------------------------------------------------------


@pytest.mark.multiprocess
def test_the_peak_is_the_high_water_mark_not_what_the_job_holds_at_its_end(database_url: str, procs: Procs, tmp_path: Path) -> None:
    state = one_device(tmp_path / "nvml.json", used_gb=1.0)
    worker = procs.worker(gpu_worker_env(database_url, state, QW_GPU_VRAM_SAMPLE_SECONDS="0.05"), "gpu")
    job = node_queue.enqueue_node_job("wave", "gpu", node_module="qw_gpu_nodes", inputs={"vram_wave": [6 * GIB, GIB]})["id"]
    wait_until(lambda: status_of(database_url, job) == "completed", timeout=30, what="the job to run")
    row = query(database_url, "SELECT peak_vram_bytes FROM workflow_node_jobs WHERE id = %s", (job,))[0]
    assert row["peak_vram_bytes"] == 6 * GIB, log_text(worker)[-2000:]


def test_the_sampler_keeps_the_highest_reading_and_torch_peak_counts_too():
    readings = iter([GIB, 5 * GIB, 2 * GIB])
    seen = threading.Event()

    def probe() -> int | None:
        value = next(readings, None)
        if value is None:
            seen.set()
        return value

    resets: list[int] = []
    sampler = PeakSampler(probe, interval=0.01, framework_reset=lambda: resets.append(1), framework_peak=lambda: None)
    sampler.start()
    assert seen.wait(10)
    assert sampler.stop() == 5 * GIB and resets == [1]
    with_torch = PeakSampler(lambda: GIB, interval=0.01, framework_reset=lambda: None, framework_peak=lambda: 7 * GIB)
    with_torch.start()
    assert with_torch.stop() == 7 * GIB  # an allocation too short for any sample, seen by torch's own peak
    nothing = PeakSampler(lambda: None, interval=0.01, framework_reset=lambda: None, framework_peak=lambda: None)
    nothing.start()
    assert nothing.stop() is None


def test_the_processes_sampled_are_the_worker_and_its_descendants():
    code = "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); print(p.pid, flush=True); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    grandchild = None
    try:
        grandchild = int(child.stdout.readline())
        assert is_own(os.getpid()) and is_own(child.pid) and is_own(grandchild)
        assert not is_own(os.getppid()) and not is_own(1)
    finally:
        child.kill()
        child.wait()
        if grandchild is not None:
            os.kill(grandchild, 9)
