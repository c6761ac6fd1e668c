"""The example's tasks (`qw_torch.infer`, `qw_torch.train_step`): node jobs on the gpu queue for model `tiny-mlp`.

Each takes its inputs as one dict. torch is imported where the job runs, not where it is enqueued.
"""

from __future__ import annotations

from typing import Any

from queue_workflows import model_registry

MODEL_ID = "tiny-mlp"


def _loaded() -> Any:
    net = model_registry.current()
    if net is None:
        raise RuntimeError(f"no model loaded: enqueue this on the gpu queue with required_model={MODEL_ID!r}, for a worker with QW_APP=qw_torch")
    return net


def infer(inputs: dict[str, Any]) -> dict[str, Any]:
    """Logits and classes for `rows` (4) input rows drawn from `seed`."""
    from qw_torch import model

    return model.infer(_loaded(), seed=int(inputs["seed"]), rows=int(inputs.get("rows", 4)))


def train_step(inputs: dict[str, Any]) -> dict[str, Any]:
    """The losses of `steps` (3) SGD steps at `lr` (0.1) on a copy of the model, over rows and labels drawn from `seed`."""
    from qw_torch import model

    return model.fine_tune(_loaded(), seed=int(inputs["seed"]), rows=int(inputs.get("rows", 32)),
                           steps=int(inputs.get("steps", 3)), lr=float(inputs.get("lr", 0.1)))
