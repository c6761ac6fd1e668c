"""The example's model: a small MLP built in code from a seed (no download), and the work a job does with it."""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from torch import nn

from queue_workflows import model_registry
from queue_workflows.gpu.devices import current_devices
from qw_torch.nodes import MODEL_ID

SEED = 1234
FEATURES, HIDDEN, CLASSES = 16, 64, 4
# The weights are a few kB; on a GPU the CUDA context and the allocator's first segments hold
# several hundred MB. The worker learns the real figure from its jobs' peaks (docs/gpu.md).
EST_VRAM_GB = 1.0


def build(seed: int = SEED) -> nn.Module:
    """The same weights for the same seed on any machine: drawn from a generator of its own, leaving torch's global RNG alone."""
    gen = torch.Generator().manual_seed(seed)
    net = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))
    with torch.no_grad():
        for layer in net:
            if isinstance(layer, nn.Linear):
                bound = 1 / math.sqrt(layer.in_features)  # nn.Linear's own default range
                layer.weight.uniform_(-bound, bound, generator=gen)
                layer.bias.uniform_(-bound, bound, generator=gen)
    return net.eval()


def batch(seed: int, rows: int) -> torch.Tensor:
    """A job's input rows, drawn from its seed."""
    return torch.randn(rows, FEATURES, generator=torch.Generator().manual_seed(seed))


def labels(seed: int, rows: int) -> torch.Tensor:
    return torch.randint(0, CLASSES, (rows,), generator=torch.Generator().manual_seed(seed + 1))


def job_device() -> torch.device:
    """The CUDA device this job reserved on (by UUID) where torch sees it, else the worker's first CUDA device, else the CPU.

    The worker's CUDA_VISIBLE_DEVICES decides which devices torch sees at all (one per worker is the
    usual shape, so cuda:0 is the worker's device); the model loads before the job's devices are
    known, so it starts there.
    """
    if not torch.cuda.is_available():
        return torch.device("cpu")
    reserved = set(current_devices())
    for index in range(torch.cuda.device_count()):
        uuid = str(getattr(torch.cuda.get_device_properties(index), "uuid", ""))  # NVML's UUID without its "GPU-"
        if uuid and (uuid in reserved or f"GPU-{uuid}" in reserved):
            return torch.device("cuda", index)
    return torch.device("cuda", 0)


def load() -> nn.Module:
    return build().to(job_device())


def register_models() -> None:
    model_registry.register(model_registry.ModelSpec(MODEL_ID, load, est_vram_gb=EST_VRAM_GB))


def _placed(net: nn.Module) -> torch.device:
    """Run where the job reserved: a warm model sitting on another device moves there (a few kB here)."""
    device = job_device()
    if next(net.parameters()).device != device:
        net.to(device)
    return device


def _reserved(device: torch.device) -> int | None:
    """torch's peak reserved memory on the job's device (what the engine stores beside NVML's), None on the CPU."""
    return int(torch.cuda.max_memory_reserved(device)) if device.type == "cuda" else None


def infer(net: nn.Module, *, seed: int, rows: int) -> dict[str, Any]:
    device = _placed(net)
    with torch.inference_mode():
        logits = net(batch(seed, rows).to(device))
    return {"logits": logits.cpu().tolist(), "classes": logits.argmax(dim=1).cpu().tolist(),
            "device": str(device), "reserved_bytes": _reserved(device)}


def fine_tune(net: nn.Module, *, seed: int, rows: int, steps: int, lr: float) -> dict[str, Any]:
    """A few SGD steps on a copy (the warm model stays as loaded, so later jobs' outputs do not drift): the losses."""
    device = _placed(net)
    tuned = copy.deepcopy(net).train()
    x, y = batch(seed, rows).to(device), labels(seed, rows).to(device)
    losses = []
    for _ in range(steps):
        tuned.zero_grad()
        loss = nn.functional.cross_entropy(tuned(x), y)
        loss.backward()
        with torch.no_grad():  # plain SGD by hand: torch.optim's first step imports torch._dynamo, seconds of a short job
            for param in tuned.parameters():
                param -= lr * param.grad
        losses.append(loss.item())
    return {"losses": losses, "device": str(device), "reserved_bytes": _reserved(device)}
