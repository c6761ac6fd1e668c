"""MIG instances and AMD partitions are devices of their own: the probe lists them by UUID with their own
memory, claims admit and reserve on each, a job's process is pinned to its instance, and its VRAM is read
there. Fake NVML/amdsmi at the process boundary (tests/support), real Postgres and real worker processes."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from procs import Procs, log_text, query, service_env, wait_until
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from test_gpu_memory import fake_nvml, gpu_worker_env, status_of
from test_gpu_packing import claim, enqueue, models, reserved

from queue_workflows import config, hw_metrics, node_queue
from queue_workflows.gpu.devices import Device, from_samples
from queue_workflows.gpu.memory import GpuMemory
from queue_workflows.gpu.side import GpuSide
from queue_workflows.telemetry import amd, nvidia, snapshot
from queue_workflows.telemetry.host import HostFigures
from queue_workflows.telemetry.nvml_mig import mig_instances
from queue_workflows.telemetry.store import QueueFigures

GIB = 1 << 30
FAKE_AMDSMI_DIR = Path(__file__).resolve().parents[1] / "support" / "fake_amdsmi"
_spec = importlib.util.spec_from_file_location("fake_amdsmi", FAKE_AMDSMI_DIR / "amdsmi.py")
assert _spec is not None and _spec.loader is not None
fake_amdsmi = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake_amdsmi)  # the fake's helpers under its own name: this process's `import amdsmi` is untouched


def instance(uuid: str, total_gb: float, *, used_gb: float = 0, procs: dict[str, int] | None = None) -> dict:
    return {"uuid": uuid, "total": int(total_gb * GIB), "base_used": int(used_gb * GIB), "procs": procs or {}}


def mig_host(path: Path, **mig_card: object) -> str:
    """A plain 24 GB card (no MIG support) beside an 80 GB card in MIG mode: two 10 GB instances and a
    40 GB one, with no instance at index 1 (NVML's NotFound)."""
    card = {"name": "Fake A100 80GB", "uuid": "GPU-mig", "total": 80 * GIB, "base_used": 0, "procs": {},
            "mig": [instance("MIG-small-a", 10), None, instance("MIG-small-b", 10), instance("MIG-big", 40)], **mig_card}
    fake_nvml.write_state(str(path), {"init_error": None, "devices": [
        {"name": "Fake A10", "uuid": "GPU-plain", "total": 24 * GIB, "base_used": 0, "procs": {}}, card]})
    return str(path)


# The probe ----------------------------------------------------------------------------------


def test_a_gpu_in_mig_mode_is_its_instances_and_a_plain_gpu_beside_it_is_itself(tmp_path, monkeypatch):
    monkeypatch.setenv("QW_FAKE_NVML", mig_host(tmp_path / "nvml.json"))
    samples = nvidia.nvml_samples(lib=fake_nvml)
    assert samples is not None
    assert [(s.index, s.uuid, s.memory_total_bytes / GIB, s.parent) for s in samples] == [
        (0, "GPU-plain", 24, None), (1, "MIG-small-a", 10, "GPU-mig"), (1, "MIG-small-b", 10, "GPU-mig"), (1, "MIG-big", 40, "GPU-mig")]
    assert samples[1].util_percent is None and samples[1].power_w is None  # the parent's readings: NotSupported on an instance
    assert samples[0].util_percent == 0 and samples[0].power_w == 50
    found = from_samples(samples, env={})
    assert [d.published() for d in found[:2]] == [
        {"uuid": "GPU-plain", "total_gb": 24, "free_gb": 24},
        {"uuid": "MIG-small-a", "total_gb": 10, "free_gb": 10, "parent": "GPU-mig"}]


def test_a_gpu_with_mig_turned_off_is_one_device(tmp_path, monkeypatch):
    monkeypatch.setenv("QW_FAKE_NVML", mig_host(tmp_path / "nvml.json", mig_mode=0))
    assert [s.uuid for s in nvidia.nvml_samples(lib=fake_nvml) or []] == ["GPU-plain", "GPU-mig"]


def _real_error(code_name: str) -> Exception:
    pynvml = pytest.importorskip("pynvml")
    if pynvml.__file__ and "fake_nvml" in pynvml.__file__:
        pytest.skip("the real nvidia-ml-py binding is shadowed")
    return pynvml.NVMLError(getattr(pynvml, code_name))


def test_the_real_bindings_errors_are_told_apart():
    """nvidia-ml-py raises NVMLError_NotSupported (no MIG on the board) and NVMLError_NotFound (no instance at an index)."""
    not_supported, not_found, unknown = (_real_error(n) for n in ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NOT_FOUND", "NVML_ERROR_UNKNOWN"))

    def raises(exc: Exception):
        def fn(*_args: object) -> None:
            raise exc
        return fn

    def by_index(errors: dict[int, Exception]):
        def fn(_handle: object, i: int) -> str:
            if i in errors:
                raise errors[i]
            return f"mig-{i}"
        return fn

    plain = SimpleNamespace(nvmlDeviceGetMigMode=raises(not_supported))
    assert mig_instances(plain, "h") is None
    assert mig_instances(SimpleNamespace(), "h") is None  # a binding too old to ask: a plain device
    off = SimpleNamespace(NVML_DEVICE_MIG_ENABLE=1, nvmlDeviceGetMigMode=lambda h: [0, 1])  # enabled only once the GPU resets
    assert mig_instances(off, "h") is None
    gaps = SimpleNamespace(NVML_DEVICE_MIG_ENABLE=1, nvmlDeviceGetMigMode=lambda h: [1, 1], nvmlDeviceGetMaxMigDeviceCount=lambda h: 4,
                           nvmlDeviceGetMigDeviceHandleByIndex=by_index({1: not_found, 3: not_found}))
    assert mig_instances(gaps, "h") == ["mig-0", "mig-2"]
    broken = SimpleNamespace(**{**gaps.__dict__, "nvmlDeviceGetMigDeviceHandleByIndex": by_index({2: unknown})})
    with pytest.raises(type(unknown)):
        mig_instances(broken, "h")  # not a gap: the probe leaves the whole GPU out rather than report part of it


def test_a_worker_pinned_to_an_instance_or_to_its_gpu_names_only_those():
    samples = [SimpleNamespace(index=0, uuid="GPU-plain", parent=None, source="nvml", memory_total_bytes=24 * GIB, memory_free_bytes=None)] + [
        SimpleNamespace(index=1, uuid=u, parent="GPU-mig", source="nvml", memory_total_bytes=10 * GIB, memory_free_bytes=None)
        for u in ("MIG-small-a", "MIG-small-b")]
    assert [d.uuid for d in from_samples(samples, env={"CUDA_VISIBLE_DEVICES": "MIG-small-b"})] == ["MIG-small-b"]
    assert [d.uuid for d in from_samples(samples, env={"CUDA_VISIBLE_DEVICES": "GPU-mig"})] == ["MIG-small-a", "MIG-small-b"]
    assert [d.uuid for d in from_samples(samples, env={"CUDA_VISIBLE_DEVICES": "1"})] == ["MIG-small-a", "MIG-small-b"]
    assert [d.uuid for d in from_samples(samples, env={"CUDA_VISIBLE_DEVICES": "0"})] == ["GPU-plain"]


def test_amd_partitions_are_processors_of_their_own(tmp_path, monkeypatch):
    state = tmp_path / "amd.json"
    fake_amdsmi.write_state(str(state), {"init_error": None, "devices": [
        {"name": "Fake MI300X", "uuid": f"AMD-part-{i}", "total": 24 * GIB, "base_used": GIB, "procs": {}} for i in range(2)]})
    monkeypatch.setenv("QW_FAKE_AMDSMI", str(state))
    samples = amd.amdsmi_samples(lib=fake_amdsmi) or []
    assert [(s.uuid, s.memory_total_bytes / GIB, s.memory_free_bytes / GIB) for s in samples] == [("AMD-part-0", 24, 23), ("AMD-part-1", 24, 23)]
    assert [d.uuid for d in from_samples(samples, env={"HIP_VISIBLE_DEVICES": "AMD-part-1"})] == ["AMD-part-1"]


# Memory read per instance --------------------------------------------------------------------


def test_a_jobs_vram_and_the_throttle_are_read_on_the_instances(tmp_path, monkeypatch):
    """NVML lists a MIG instance's processes on the instance, not on its GPU: a job holding 8 GB there is seen."""
    path = mig_host(tmp_path / "nvml.json")
    monkeypatch.setenv("QW_FAKE_NVML", path)
    fake_nvml.set_process_memory(path, 4242, 8 * GIB, "MIG-small-a")
    fake_nvml.set_process_memory(path, 999999, int(9.5 * GIB), "MIG-small-b")  # a neighbour's slice, nearly full
    memory = GpuMemory(lambda: fake_nvml, lambda: fake_amdsmi)
    assert memory.process_bytes({4242}) == 8 * GIB
    assert memory.process_bytes({4242}, uuids=["MIG-small-a"]) == 8 * GIB
    assert memory.process_bytes({4242}, uuids=["MIG-big"]) == 0  # a job placed elsewhere reads its own instance only
    assert memory.process_bytes({4242}, uuids=["GPU-unknown"]) == 8 * GIB  # a UUID NVML does not list: every device, not none
    assert memory.device_percent() == 95.0  # the fullest device is the neighbour's slice
    assert memory.device_percent(besides={4242}) == 95.0
    memory.watch(["MIG-small-a", "GPU-plain"])  # a worker given the plain card and one slice
    assert memory.device_percent() == 80.0
    assert memory.device_percent(besides={4242}) == 0.0


# Admission per instance ----------------------------------------------------------------------

SMALL_A, SMALL_B, BIG = Device("MIG-small-a", 10.0, 10.0, "GPU-mig"), Device("MIG-small-b", 10.0, 10.0, "GPU-mig"), Device("MIG-big", 40.0, 40.0, "GPU-mig")


def test_a_12_gb_job_never_lands_on_a_10_gb_slice_and_8_gb_jobs_fill_the_small_slices(conn):
    models(conn, m12=12, m8=8)
    big = enqueue("m12")
    assert claim(conn, SMALL_A, SMALL_B, worker="w0") is None, "12 GB > 10 - 1 on either slice"
    first, second = enqueue("m8"), enqueue("m8")
    assert claim(conn, SMALL_A, SMALL_B, BIG, worker="w1")["id"] == big and reserved(conn, big) == (["MIG-big"], 12.0)
    assert claim(conn, SMALL_A, SMALL_B, BIG, worker="w2")["id"] == first and reserved(conn, first) == (["MIG-small-a"], 8.0)
    assert claim(conn, SMALL_A, SMALL_B, BIG, worker="w3")["id"] == second and reserved(conn, second) == (["MIG-small-b"], 8.0)


# Real worker processes ------------------------------------------------------------------------


def spans_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def running(database_url: str, jobs: list[int]) -> bool:
    return len(query(database_url, "SELECT 1 FROM workflow_node_jobs WHERE id = ANY(%s) AND status = 'running'", (jobs,))) == len(jobs)


@pytest.mark.multiprocess
def test_workers_pack_a_mig_card_and_a_plain_card_on_one_host(database_url: str, procs: Procs, tmp_path: Path) -> None:
    state = mig_host(tmp_path / "nvml.json")
    spans, go = tmp_path / "spans.jsonl", tmp_path / "go"
    env = gpu_worker_env(database_url, state, QW_POLL_SECONDS="0.2", QW_GPU_VRAM_SAMPLE_SECONDS="0.1")
    hold = {"seconds": 30, "until": str(go), "at_least": 1.0, "spans": str(spans)}  # ten sampler intervals at least
    jobs = {m: node_queue.enqueue_node_job(f"hold-{m}", "gpu", node_module="qw_gpu_nodes", required_model=m, inputs={"hold_gb": gb, **hold})["id"]
            for m, gb in (("a12", 12), ("a8", 8), ("b8", 8))}
    workers = [procs.worker(env, "gpu") for _ in range(3)]
    wait_until(lambda: running(database_url, list(jobs.values())), timeout=60, what="the three jobs to run at once")
    go.touch()
    wait_until(lambda: all(status_of(database_url, j) == "completed" for j in jobs.values()), timeout=30, what="the jobs to end")
    rows = {r["id"]: r for r in query(database_url, "SELECT id, gpu_devices, vram_reserved_gb, peak_vram_bytes FROM workflow_node_jobs "
                                                    "WHERE id = ANY(%s)", (list(jobs.values()),))}
    assert rows[jobs["a12"]]["gpu_devices"] == ["GPU-plain"], "best fit: 23 GB of room on the plain card, 39 on the 40 GB slice, none on a 10 GB one"
    assert sorted(rows[jobs[m]]["gpu_devices"][0] for m in ("a8", "b8")) == ["MIG-small-a", "MIG-small-b"]  # one 8 GB job per small slice
    assert {r["peak_vram_bytes"] for r in rows.values()} == {12 * GIB, 8 * GIB}  # each sampled on its own instance
    assert rows[jobs["a8"]]["peak_vram_bytes"] == 8 * GIB
    by_device = {s["device"]: s for s in spans_of(spans)}
    assert by_device["MIG-small-a"]["env"]["CUDA_VISIBLE_DEVICES"] == "MIG-small-a"  # a subprocess is pinned to its slice
    assert by_device["GPU-plain"]["env"]["CUDA_VISIBLE_DEVICES"] == "GPU-plain"
    beats = query(database_url, "SELECT gpu_devices FROM worker_heartbeats WHERE pid = %s", (workers[0].pid,))
    assert [(d["uuid"], d["total_gb"], d.get("parent")) for d in beats[0]["gpu_devices"]] == [
        ("GPU-plain", 24, None), ("MIG-small-a", 10, "GPU-mig"), ("MIG-small-b", 10, "GPU-mig"), ("MIG-big", 40, "GPU-mig")]
    assert all("Traceback" not in log_text(w) for w in workers)


@pytest.mark.multiprocess
def test_workers_reserve_on_amd_partitions_and_the_job_sees_its_own(database_url: str, procs: Procs, tmp_path: Path) -> None:
    """An MI300X in CPX mode: amdsmi lists each partition as a processor with its own VRAM and UUID."""
    state, spans, go = tmp_path / "amd.json", tmp_path / "spans.jsonl", tmp_path / "go"
    fake_amdsmi.write_state(str(state), {"init_error": None, "devices": [
        {"name": "Fake MI300X", "uuid": f"AMD-part-{i}", "total": 24 * GIB, "base_used": 0, "procs": {}} for i in range(2)]})
    env = service_env(database_url, QW_APP="qw_gpu_nodes", QW_HEARTBEAT_SECONDS="0.2", QW_POLL_SECONDS="0.2",
                      QW_GPU_VRAM_SAMPLE_SECONDS="0.1", QW_FAKE_AMDSMI=str(state))
    env["PYTHONPATH"] = os.pathsep.join([str(FAKE_AMDSMI_DIR), env["PYTHONPATH"]])
    hold = {"hold_gb": 12, "seconds": 30, "until": str(go), "at_least": 1.0, "spans": str(spans)}
    jobs = [node_queue.enqueue_node_job(f"hold-{m}", "gpu", node_module="qw_gpu_nodes", required_model=m, inputs=hold)["id"] for m in ("a12", "b12")]
    workers = [procs.worker(env, "gpu") for _ in range(2)]
    wait_until(lambda: running(database_url, jobs), timeout=60, what="both 12 GB jobs to run at once, one per partition")
    go.touch()
    wait_until(lambda: all(status_of(database_url, j) == "completed" for j in jobs), timeout=30, what="the jobs to end")
    rows = query(database_url, "SELECT gpu_devices, peak_vram_bytes FROM workflow_node_jobs WHERE id = ANY(%s)", (jobs,))
    assert sorted(r["gpu_devices"][0] for r in rows) == ["AMD-part-0", "AMD-part-1"], "12 + 12 GB leave no 1 GB margin on one 24 GB partition"
    assert [r["peak_vram_bytes"] for r in rows] == [12 * GIB, 12 * GIB]  # amdsmi's per-process VRAM, read on the partition
    assert {s["device"]: s["env"]["HIP_VISIBLE_DEVICES"] for s in spans_of(spans)} == {"AMD-part-0": "AMD-part-0", "AMD-part-1": "AMD-part-1"}
    assert all("Traceback" not in log_text(w) for w in workers)


def test_an_oom_reads_what_was_free_on_the_jobs_own_slice(tmp_path, monkeypatch):
    """The OOM raise is what the job held plus what was free where it ran: a 10 GB slice's 2 GB, not the host's 70."""
    path = mig_host(tmp_path / "nvml.json")
    monkeypatch.setenv("QW_FAKE_NVML", path)
    fake_nvml.set_process_memory(path, 4242, 8 * GIB, "MIG-small-a")
    settings = config.current().settings.model_copy(update={"gpu_free_vram_gb": None})
    side = GpuSide(settings, probe=lambda: nvidia.nvml_samples(lib=fake_nvml) or [])
    assert side.free_gb(["MIG-small-a"]) == 2.0
    assert side.free_gb(["MIG-small-a", "MIG-big"]) == 2.0  # a gang's tightest device
    assert side.free_gb() == 24 + 2 + 10 + 40  # no reservation: the host's, as before


def test_the_hw_snapshot_and_metrics_tell_instances_of_one_gpu_apart(tmp_path, monkeypatch):
    """Instances share their GPU's index: the snapshot names their GPU and the metrics label them by UUID, so no series repeats."""
    monkeypatch.setenv("QW_FAKE_NVML", mig_host(tmp_path / "nvml.json"))
    host = HostFigures(cpu_percent=1.0, cpu_count=2, load=(0.0, 0.0, 0.0), memory_used_bytes=1, memory_total_bytes=2,
                       swap_used_bytes=0, swap_total_bytes=0)
    payload = snapshot.build(host_label="h", sampled_at=1.0, host=host, gpus=nvidia.nvml_samples(lib=fake_nvml) or [], stack=None)
    assert [g.get("parent") for g in payload["gpus"]] == [None, "GPU-mig", "GPU-mig", "GPU-mig"]
    assert "parent" not in payload["gpus"][0]  # a whole GPU's entry keeps version 1's keys
    state = hw_metrics.MetricsState(host_label="h")
    state.update(payload=payload, queues=QueueFigures(), outcomes={}, database_up=True, costs={})
    totals = {s.labels["gpu"]: s.value for family in text_string_to_metric_families(generate_latest(hw_metrics.registry_for(state)).decode())
              for s in family.samples if s.name == "qw_gpu_memory_total_bytes"}
    assert totals == {"0": 24 * GIB, "1/MIG-small-a": 10 * GIB, "1/MIG-small-b": 10 * GIB, "1/MIG-big": 40 * GIB}
