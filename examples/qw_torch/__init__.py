"""A PyTorch example app (QW_APP=qw_torch): a small seeded MLP registered as a gpu model, and tasks that run it.

Needs torch (`pip install 'queue-workflows[torch]'`) only where a gpu worker runs: importing the
app (an enqueuer, `qw`) does not import torch; the worker's registrar does, once, at its start.
"""

from __future__ import annotations

from queue_workflows import model_registry, register_node_callable
from qw_torch.nodes import MODEL_ID, infer, train_step

__all__ = ["MODEL_ID", "register_models"]


def register_models() -> None:
    from qw_torch import model  # torch: heavy, and needed only by the gpu worker calling this

    model.register_models()


model_registry.set_builtin_model_registrar(register_models)
# By name, so a process that imported the app enqueues them whatever its QW_NODE_PACKAGES says.
register_node_callable("qw_torch.infer", infer)
register_node_callable("qw_torch.train_step", train_step)
