"""Your extensions to this package. This file is yours: edit it freely.

ascend-scaffold renders it once; `ascend-scaffold update` and `copier update` never touch it
again (it is listed in `_skip_if_exists`). Put model-specific changes here instead of
editing template-owned files (modeling.py, graph.py, runner.py, ops/, tests/), so template
upgrades merge without conflicts (ascend-scaffold docs: "Upgrading a generated package").

Hooks (called by template-owned code; keep the names and signatures):

- `register_custom_ops(ops, backend)`: called by `ops.load(backend)` after the backend
  module ("npu" or "portable") is imported. Replace a fused op, e.g.
  `ops.attention = my_attention`, keeping its signature so the decode graph stays the same
  (one graph, no breaks). May run more than once: keep it idempotent.
- `weight_name_overrides()`: checkpoint tensor name -> the Hugging Face name the loader
  (weights.py) expects, for checkpoints saved with other names, e.g.
  `{"transformer.wte.weight": "model.embed_tokens.weight"}`. Unlisted names are kept.
"""

from __future__ import annotations

from types import ModuleType


def register_custom_ops(ops: ModuleType, backend: str) -> None:
    """Customise the ops backend module `ops` (named `backend`) in place."""


def weight_name_overrides() -> dict[str, str]:
    """Checkpoint tensor names to rename before loading."""
    return {}
