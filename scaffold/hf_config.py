"""Interview answers from a Hugging Face `config.json` (`new model --from-hf-config PATH`).

The config is read by the runtime's reader, `ascend_runtime.hf_config` (standard library
only, so the scaffold imports it without torch), the one the rendered package's checkpoint
loader uses: the scaffold and the package accept and refuse the same configs.
Its HFConfigError becomes a UserError (one line, exit 2) before anything is written.
Only the scaffold's own answers are decided here: `model_name` from the checkpoint
directory, `dtype` and `max_seq_len`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from ascend_runtime import hf_config as reader

from .errors import UserError
from .questions import asked_questions
from .spec import name_problem

DTYPES = ("bfloat16", "float16")  # a float32 checkpoint runs in the default bfloat16 on the device
HFConfigError = reader.HFConfigError
SUPPORTED_MODEL_TYPES: tuple[str, ...] = reader.SUPPORTED_MODEL_TYPES


def read_hf_config(path: Path):
    """The reader's HFConfig for `path`; its errors as a one-line UserError (exit 2)."""
    try:
        return reader.read_hf_config(path)
    except HFConfigError as exc:
        raise UserError(" ".join(str(exc).split())) from None


def _model_name(file: Path) -> str | None:
    """A package name from the checkpoint directory's name (`Qwen3-0.6B` -> `qwen3_0_6b`),
    held to the same rules as a typed one; None when the name has no letters to start."""
    directory = file.parent.resolve()
    name = re.sub(r"[^a-z0-9]+", "_", directory.name.lower()).strip("_")
    if not name or not name[0].isalpha():
        return None
    problem = name_problem(name)
    if problem:
        raise UserError(
            f"{problem} (derived from the checkpoint directory {directory}); "
            "choose one with --model-name"
        )
    return name


def answers_from_hf_config(path: Path, derive_name: bool = True) -> dict[str, Any]:
    """Interview answers (copier.yml names) for the architecture in a HF config.

    `path` is a config.json or a checkpoint directory holding one. Returns every
    architecture answer, `dtype` when the config names a device dtype (float32 keeps the
    default), `max_seq_len` when `max_position_embeddings` is below the default, and
    (when `derive_name`) `model_name` derived from the directory name. Raises UserError otherwise.
    """
    hf = read_hf_config(path)
    if hf.quantization is not None:
        print(
            f"note: {hf.file} is quantized ({hf.quantization}): the package renders its "
            "architecture, and its loader takes float weights only (dequantise the checkpoint "
            "before loading it)",
            file=sys.stderr,
        )
    answers = dict(hf.architecture)
    if answers["family"] == "mla":  # flags the loader checks, no questions of family mla
        for flag in ("qk_norm", "attention_bias"):
            answers.pop(flag)
        if answers["topk_method"] == "greedy":  # no groups to answer for
            for groups in ("n_group", "topk_group"):
                answers.pop(groups)
    if hf.dtype in DTYPES:
        answers["dtype"] = hf.dtype
    default_len = next(q for q in asked_questions() if q.name == "max_seq_len").default_for({})
    if 2 <= hf.max_position_embeddings < default_len:
        answers["max_seq_len"] = hf.max_position_embeddings
    name = _model_name(hf.file) if derive_name else None
    if name is not None:
        answers["model_name"] = name
    return answers
