"""GPU probes: fake vendor tools on PATH (hanging, garbage, a lost device), fake NVML/amdsmi modules, and the real libraries where a GPU exists."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from queue_workflows.gpu.probe import GpuSample, probe_gpus
from queue_workflows.telemetry import amd, gpus, nvidia
from queue_workflows.telemetry.gpu_sample import MIB

GIB = 1024 * MIB


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A bin folder first on PATH holding only the fakes a test writes; the vendor libraries hidden."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setattr(nvidia, "load_pynvml", lambda: None)
    monkeypatch.setattr(amd, "load_amdsmi", lambda: None)
    for real in ("nvidia-smi", "amd-smi", "rocm-smi"):  # a real tool further down PATH must not answer
        _write(bin_dir / real, "exit 9")

    def write(name: str, script: str) -> Path:
        return _write(bin_dir / name, script)

    return write


def _write(path: Path, script: str) -> Path:
    path.write_text("#!/bin/sh\n" + script + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _cat(text: str, rc: int = 0) -> str:
    return f"cat <<'QW_EOF'\n{text}\nQW_EOF\nexit {rc}"


ROCM_JSON = json.dumps({
    "card0": {
        "GPU use (%)": "37", "VRAM Total Memory (B)": str(16 * GIB), "VRAM Total Used Memory (B)": str(3 * GIB),
        "Temperature (Sensor edge) (C)": "51.0", "Temperature (Sensor junction) (C)": "60.0",
        "Average Graphics Package Power (W)": "88.0", "Card series": "Radeon RX 7900 XTX", "Unique ID": "0x5a1b",
    },
    "system": {"Driver version": "6.8.5"},
})


def test_nvidia_smi_rows_become_samples_in_bytes(tools):
    tools("nvidia-smi", _cat("0, NVIDIA RTX A6000, GPU-aaa, 41, 1024, 49140, 63, 120.50\n1, NVIDIA RTX A6000, GPU-bbb, [N/A], 0, 49140, [N/A], [Not Supported]"))
    samples = probe_gpus(timeout=5)
    assert samples == [
        GpuSample(0, "NVIDIA RTX A6000", "GPU-aaa", "nvidia-smi", 41.0, 1024 * MIB, 49140 * MIB, 63.0, 120.5),
        GpuSample(1, "NVIDIA RTX A6000", "GPU-bbb", "nvidia-smi", None, 0, 49140 * MIB, None, None),
    ]
    assert samples[0].memory_free_bytes == (49140 - 1024) * MIB


def test_a_lost_device_is_left_out_and_the_others_reported(tools):
    tools("nvidia-smi", _cat(
        "0, Tesla T4, GPU-t4, 5, 300, 15360, 40, 27.1\n"
        "Unable to determine the device handle for GPU 0000:3B:00.0: GPU is lost.  Reboot the system to recover this GPU\n"
        "2, Tesla T4, GPU-x, [GPU is lost], [GPU is lost], [GPU is lost], [GPU is lost], [GPU is lost]", rc=15))
    assert [(s.index, s.uuid) for s in probe_gpus(timeout=5)] == [(0, "GPU-t4")]


def test_a_hanging_tool_is_absent_within_its_timeout_and_the_next_source_answers(tools):
    # Not `exec sleep`: the shell's child holds the pipe, so the whole process group must die.
    tools("nvidia-smi", "sleep 60\necho '0, late, GPU-z, 1, 1, 1, 1, 1'")
    tools("rocm-smi", _cat(ROCM_JSON))
    started = time.monotonic()
    samples = probe_gpus(timeout=0.5)
    assert time.monotonic() - started < 5
    assert [(s.source, s.index, s.name) for s in samples] == [("rocm-smi", 0, "Radeon RX 7900 XTX")]


@pytest.mark.parametrize("garbage", ["", "hello world", "Failed to initialize NVML: Driver/library version mismatch", "\x00\xff,,,,,,,"])
def test_garbage_from_every_tool_is_no_gpu_not_an_error(tools, garbage):
    for name in ("nvidia-smi", "amd-smi", "rocm-smi"):
        tools(name, f"printf '%s' '{garbage}'")
    assert probe_gpus(timeout=5) == []


def test_garbage_from_nvidia_smi_falls_through_to_amd(tools):
    tools("nvidia-smi", _cat("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", rc=9))
    tools("rocm-smi", _cat(ROCM_JSON))
    (sample,) = probe_gpus(timeout=5)
    assert sample == GpuSample(0, "Radeon RX 7900 XTX", "0x5a1b", "rocm-smi", 37.0, 3 * GIB, 16 * GIB, 51.0, 88.0)


def test_rocm_smi_garbage_json_and_cards_without_memory_are_absent():
    assert amd.parse_rocm_smi("{not json") is None
    assert amd.parse_rocm_smi("[1, 2]") is None
    assert amd.parse_rocm_smi(json.dumps({"card0": {"GPU use (%)": "5"}, "card1": "lost"})) is None


AMD_SMI_METRIC_NEW = json.dumps({"gpu_data": [{
    "gpu": 0,
    "usage": {"gfx_activity": {"value": 12, "unit": "%"}},
    "power": {"socket_power": {"value": 210, "unit": "W"}},
    "temperature": {"edge": {"value": 47, "unit": "C"}, "hotspot": {"value": 55, "unit": "C"}},
    "mem_usage": {"total_vram": {"value": 196592, "unit": "MB"}, "used_vram": {"value": 283, "unit": "MB"}},
}]})
AMD_SMI_METRIC_OLD = json.dumps([{
    "gpu": 1,
    "usage": {"gfx_activity": 3},
    "power": {"average_socket_power": "N/A"},
    "temperature": {"edge": "N/A", "hotspot": 44},
    "mem_usage": {"total_vram": 16368, "used_vram": 10},
}])


def test_amd_smi_both_json_shapes(tools):
    tools("amd-smi", f"""case "$1" in
  metric) cat <<'QW_EOF'
{AMD_SMI_METRIC_NEW}
QW_EOF
;;
  static) echo '[{{"gpu": 0, "asic": {{"market_name": "MI300X"}}}}]' ;;
  *) exit 2 ;;
esac""")
    assert probe_gpus(timeout=5) == [GpuSample(0, "MI300X", None, "amd-smi", 12.0, 283 * MIB, 196592 * MIB, 47.0, 210.0)]
    assert amd.parse_amd_smi(AMD_SMI_METRIC_OLD, "garbage") == [
        GpuSample(1, "gpu1", None, "amd-smi", 3.0, 10 * MIB, 16368 * MIB, 44.0, None)
    ]
    assert amd.parse_amd_smi('[{"gpu": true, "mem_usage": {}}, {"gpu": "0"}, 7]') is None


# --- NVML and amdsmi behind their injectable seams ------------------------------------------


class FakeNVMLError(Exception):
    pass


def fake_nvml(devices: list[dict | None], *, init_error: bool = False, gate: threading.Event | None = None):
    """A stand-in for `pynvml`: each device a dict of readings, None for a lost one."""

    def init():
        if gate is not None:
            gate.wait(30)
        if init_error:
            raise FakeNVMLError("NVML Shared Library Not Found")

    def dev(handle: int) -> dict:
        device = devices[handle]
        if device is None:
            raise FakeNVMLError("GPU is lost")
        return device

    def reading(key: str):
        def read(handle: int, *args):
            value = dev(handle).get(key)
            if value is None:
                raise FakeNVMLError("Not Supported")
            return value
        return read

    return SimpleNamespace(
        NVML_TEMPERATURE_GPU=0,
        nvmlInit=init,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: len(devices),
        nvmlDeviceGetHandleByIndex=lambda i: dev(i) and i,
        nvmlDeviceGetName=reading("name"),
        nvmlDeviceGetUUID=reading("uuid"),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=dev(h)["used"], total=dev(h)["total"], free=0),
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=dev(h)["util"], memory=0),
        nvmlDeviceGetTemperature=reading("temp"),
        nvmlDeviceGetPowerUsage=reading("power_mw"),
    )


def test_nvml_reads_each_device_and_leaves_a_lost_one_out():
    lib = fake_nvml([
        {"name": b"NVIDIA H100", "uuid": "GPU-h100", "used": 5 * GIB, "total": 80 * GIB, "util": 99, "temp": 71, "power_mw": 350_500},
        None,
        {"name": "NVIDIA L4", "uuid": "GPU-l4", "used": 0, "total": 24 * GIB, "util": 0, "temp": None, "power_mw": None},
    ])
    assert nvidia.nvml_samples(lib=lib, timeout=5) == [
        GpuSample(0, "NVIDIA H100", "GPU-h100", "nvml", 99.0, 5 * GIB, 80 * GIB, 71.0, 350.5),
        GpuSample(2, "NVIDIA L4", "GPU-l4", "nvml", 0.0, 0, 24 * GIB, None, None),
    ]


def test_a_device_lost_in_the_middle_of_a_read_is_left_out_but_an_unsupported_field_is_not():
    lib = fake_nvml([
        {"name": "A", "uuid": "GPU-a", "used": 1, "total": 2, "util": 3, "temp": None, "power_mw": None},
        {"name": "B", "uuid": "GPU-b", "used": 1, "total": 2, "util": 3, "temp": 40, "power_mw": 1000},
    ])
    real_temperature = lib.nvmlDeviceGetTemperature

    def temperature(handle, *args):
        if handle == 1:
            raise FakeNVMLError("GPU is lost")
        return real_temperature(handle, *args)

    lib.nvmlDeviceGetTemperature = temperature
    assert [(s.uuid, s.temperature_c) for s in nvidia.nvml_samples(lib=lib, timeout=5)] == [("GPU-a", None)]


def test_nvml_without_a_driver_is_absent_so_nvidia_smi_answers(tools, monkeypatch):
    monkeypatch.setattr(nvidia, "load_pynvml", lambda: fake_nvml([], init_error=True))
    assert nvidia.nvml_samples(timeout=5) is None
    tools("nvidia-smi", _cat("0, NVIDIA A2, GPU-a2, 1, 2, 3, 4, 5"))
    assert [s.source for s in probe_gpus(timeout=5)] == ["nvidia-smi"]


def test_a_hanging_nvml_is_absent_and_not_called_again_while_stuck():
    gate = threading.Event()
    lib = fake_nvml([{"name": "x", "uuid": "u", "used": 1, "total": 2, "util": 1, "temp": 1, "power_mw": 1}], gate=gate)
    try:
        started = time.monotonic()
        assert nvidia.nvml_samples(lib=lib, timeout=0.3) is None
        assert 0.25 < time.monotonic() - started < 3
        started = time.monotonic()
        assert nvidia.nvml_samples(lib=lib, timeout=5) is None  # refused at once: the first call is still stuck
        assert time.monotonic() - started < 1
    finally:
        gate.set()
    from queue_workflows.testing import wait_until

    wait_until(lambda: nvidia.nvml_samples(lib=lib, timeout=5), timeout=10, what="NVML to answer once unstuck")


def test_calls_that_answer_in_time_may_overlap():
    slow = fake_nvml([{"name": "x", "uuid": "u", "used": 1, "total": 2, "util": 1, "temp": 1, "power_mw": 1}])
    real_init = slow.nvmlInit
    slow.nvmlInit = lambda: (time.sleep(0.3), real_init())
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(nvidia.nvml_samples(lib=slow, timeout=5))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(results) == 3 and all(r is not None and [s.uuid for s in r] == ["u"] for r in results)


def test_amdsmi_reads_devices_and_leaves_an_unreadable_one_out():
    class Lib:
        AmdSmiTemperatureType = SimpleNamespace(EDGE="edge")
        AmdSmiTemperatureMetric = SimpleNamespace(CURRENT="current")

        def amdsmi_init(self): pass
        def amdsmi_shut_down(self): pass
        def amdsmi_get_processor_handles(self): return ["h0", "gone", "h2"]

        def amdsmi_get_gpu_vram_usage(self, h):
            if h == "gone":
                raise RuntimeError("AMDSMI_STATUS_NOT_FOUND")
            return {"vram_total": 65520, "vram_used": 20}

        def amdsmi_get_gpu_asic_info(self, h): return {"market_name": "Instinct MI210"}
        def amdsmi_get_gpu_device_uuid(self, h): return f"uuid-{h}"
        def amdsmi_get_gpu_activity(self, h): return {"gfx_activity": 7, "umc_activity": 0}
        def amdsmi_get_power_info(self, h): return {"current_socket_power": "N/A", "average_socket_power": 41}

        def amdsmi_get_temp_metric(self, h, kind, metric):
            assert (kind, metric) == ("edge", "current")
            return 38

    assert amd.amdsmi_samples(lib=Lib(), timeout=5) == [
        GpuSample(0, "Instinct MI210", "uuid-h0", "amdsmi", 7.0, 20 * MIB, 65520 * MIB, 38.0, 41.0),
        GpuSample(2, "Instinct MI210", "uuid-h2", "amdsmi", 7.0, 20 * MIB, 65520 * MIB, 38.0, 41.0),
    ]


def test_a_source_that_raises_does_not_stop_the_others():
    def broken(*, timeout: float):
        raise ZeroDivisionError("parser bug")

    amd_sample = GpuSample(0, "g", None, "rocm-smi", None, None, None, None, None)
    assert gpus.probe(vendors=[(broken,), (lambda *, timeout: [amd_sample],)]) == [amd_sample]


# --- the real libraries, where this machine has the hardware ---------------------------------


def test_real_nvml_where_an_nvidia_gpu_exists():
    lib = nvidia.load_pynvml()
    if lib is None:
        pytest.skip("nvidia-ml-py (pynvml) is not installed")
    try:
        lib.nvmlInit()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"no NVIDIA driver on this machine: {exc}")
    count = lib.nvmlDeviceGetCount()
    lib.nvmlShutdown()
    samples = nvidia.nvml_samples(timeout=10)
    assert samples is not None and len(samples) <= count
    for sample in samples:
        assert sample.source == "nvml" and sample.memory_total_bytes and sample.memory_total_bytes > 0


def test_real_amdsmi_where_an_amd_gpu_exists():
    lib = amd.load_amdsmi()
    if lib is None:
        pytest.skip("the amdsmi library is not installed (it ships with ROCm)")
    try:
        lib.amdsmi_init()
        lib.amdsmi_shut_down()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"no amdgpu driver on this machine: {exc}")
    samples = amd.amdsmi_samples(timeout=10)
    assert samples is not None
    for sample in samples:
        assert sample.source == "amdsmi" and sample.memory_total_bytes and sample.memory_total_bytes > 0
