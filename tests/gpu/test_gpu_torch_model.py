"""The PyTorch example (examples/qw_torch) end to end: a real gpu worker process runs the seeded MLP against a
real Postgres, on CPU torch with a fake NVML at the process boundary for the VRAM accounting; where this machine
has a GPU (CUDA torch and NVML), the same test runs there too and measures real VRAM."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from procs import Procs, log_text, query, service_env, wait_until
from test_gpu_memory import fake_nvml, gpu_worker_env, one_device

torch = pytest.importorskip("torch", reason="torch is not installed: `pip install -e '.[torch]'` runs the PyTorch example's test (.ci/run does)")
from qw_torch import model as torch_model  # noqa: E402 - only once torch is known to be there

JOBS = "SELECT id, status, error, context_delta, model_hit, model_load_seconds, peak_vram_bytes FROM workflow_node_jobs WHERE id = ANY(%s)"
HELD = 768 << 20  # what the fake NVML says the worker process holds: a real card's CUDA context and weights


def _why_no_gpu() -> str | None:
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device"
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - any failure means no real VRAM reading here
        return f"NVML does not load ({type(exc).__name__}: {exc})"
    return None


def _expected_logits(seed: int, rows: int):
    with torch.inference_mode():
        return torch_model.build()(torch_model.batch(seed, rows))


def _expected_losses(seed: int, rows: int, steps: int, lr: float) -> list[float]:
    net = torch_model.build().train()
    x, y = torch_model.batch(seed, rows), torch_model.labels(seed, rows)
    losses = []
    for _ in range(steps):
        net.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        with torch.no_grad():
            for param in net.parameters():
                param -= lr * param.grad
        losses.append(loss.item())
    return losses


@pytest.mark.multiprocess
@pytest.mark.parametrize("vram", ["fake_nvml", "real_gpu"])
def test_the_torch_model_loads_once_computes_its_seeded_outputs_and_records_peak_vram(
    vram: str, database_url: str, procs: Procs, tmp_path: Path
) -> None:
    real = vram == "real_gpu"
    if real and (why := _why_no_gpu()) is not None:
        pytest.skip(f"no GPU to measure real VRAM on: {why}")
    if real:
        env = service_env(database_url, QW_GPU_CPU_FALLBACK="0")  # the probe must find the real GPU
    else:
        state = one_device(tmp_path / "nvml.json", used_gb=0.5)
        env = gpu_worker_env(database_url, state)
    env.update(QW_APP="qw_torch", QW_GPU_VRAM_SAMPLE_SECONDS="0.05")
    worker = procs.worker(env, "gpu")
    if not real:
        fake_nvml.set_process_memory(state, worker.pid, HELD)

    enqueued = subprocess.run([sys.executable, "-m", "qw_torch", "4"], env=env, capture_output=True, text=True, timeout=60)
    assert enqueued.returncode == 0, enqueued.stderr
    ids = json.loads(enqueued.stdout)
    all_ids = [*ids["infer"], ids["train_step"]]

    def finished() -> list[dict] | None:
        rows = query(database_url, JOBS, (all_ids,))
        return rows if all(r["status"] in ("completed", "failed") for r in rows) else None

    rows = {r["id"]: r for r in wait_until(finished, timeout=60, what="the torch jobs")}
    assert {r["status"] for r in rows.values()} == {"completed"}, ([r["error"] for r in rows.values()], log_text(worker)[-3000:])

    tolerance = {"atol": 1e-4, "rtol": 1e-3} if real else {"atol": 1e-6, "rtol": 1e-5}  # a GPU's kernels sum in another order
    for seed, job in enumerate(ids["infer"]):
        out = rows[job]["context_delta"]
        expected = _expected_logits(seed, 4)
        torch.testing.assert_close(torch.tensor(out["logits"]), expected, **tolerance)
        assert out["classes"] == expected.argmax(dim=1).tolist()
    trained = rows[ids["train_step"]]["context_delta"]
    expected_losses = _expected_losses(0, 32, 3, 0.1)
    torch.testing.assert_close(torch.tensor(trained["losses"]), torch.tensor(expected_losses), **tolerance)
    assert trained["losses"][-1] < trained["losses"][0]  # it learned

    outputs = [r["context_delta"] for r in rows.values()]
    assert {o["device"] for o in outputs} == ({"cuda:0"} if real else {"cpu"})
    misses = [r for r in rows.values() if not r["model_hit"]]
    assert len(misses) == 1 and misses[0]["model_load_seconds"] > 0  # loaded once, then warm for the other four
    peaks = [r["peak_vram_bytes"] for r in rows.values()]
    if real:  # NVML's samples (with the CUDA context), and never below what torch's allocator itself reserved
        assert all(p and p >= o["reserved_bytes"] for p, o in zip(peaks, outputs)), (peaks, [o["reserved_bytes"] for o in outputs])
        print(f"real VRAM peaks: {peaks}; torch reserved: {[o['reserved_bytes'] for o in outputs]}")
    else:
        assert peaks == [HELD] * len(rows), log_text(worker)[-2000:]
