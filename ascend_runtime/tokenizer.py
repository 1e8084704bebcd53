"""Prompt -> token ids for the runner: a checkpoint's own tokenizer when one can be loaded,
else token ids given directly. Local files only; nothing is downloaded."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import torch

from .config import InputError

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")


class PromptError(InputError):
    """The prompt or token ids cannot be used (no tokenizer, empty, outside the vocabulary)."""


class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class _Wrapped:
    """`tokenizers.Tokenizer` or a transformers tokenizer behind one small interface."""

    def __init__(self, inner, fast: bool):
        self.inner, self.fast = inner, fast

    def encode(self, text: str) -> list[int]:
        return self.inner.encode(text).ids if self.fast else self.inner.encode(text)

    def decode(self, ids: list[int]) -> str:
        return self.inner.decode(ids, skip_special_tokens=True)


def load_tokenizer(model_path: str | Path | None) -> Tokenizer | None:
    """The checkpoint directory's tokenizer, or None when it has none or neither
    `transformers` nor `tokenizers` is installed."""
    if not model_path:
        return None
    path = Path(model_path)
    if not any((path / name).is_file() for name in _TOKENIZER_FILES):
        return None
    try:
        from transformers import AutoTokenizer

        return _Wrapped(AutoTokenizer.from_pretrained(path, local_files_only=True), fast=False)
    except Exception:  # not installed, or it cannot read these files: try `tokenizers`
        pass
    if (path / "tokenizer.json").is_file():
        try:
            from tokenizers import Tokenizer as FastTokenizer
        except ImportError:
            return None
        try:
            return _Wrapped(FastTokenizer.from_file(str(path / "tokenizer.json")), fast=True)
        except Exception as exc:  # tokenizers raises its own Exception on a bad file
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise PromptError(f"{path / 'tokenizer.json'} cannot be read: {reason}") from None
    return None


def parse_token_ids(text: str, vocab_size: int) -> list[int]:
    """'1,2,3' or '1 2 3' -> [1, 2, 3], each checked against the vocabulary."""
    try:
        ids = [int(part) for part in text.replace(",", " ").split()]
    except ValueError:
        raise PromptError(f"token ids must be integers separated by commas, got {text!r}") from None
    if not ids:
        raise PromptError("token ids are empty")
    bad = [i for i in ids if not 0 <= i < vocab_size]
    if bad:
        raise PromptError(f"token ids {bad[:5]} are outside the vocabulary [0, {vocab_size})")
    return ids


def prompt_ids(
    *,
    model_path: str | Path | None,
    prompt: str | None,
    token_ids: str | None,
    batch_size: int,
    vocab_size: int,
) -> tuple[torch.Tensor | None, Tokenizer | None]:
    """(batch, len) prompt ids from `prompt` (tokenized) or `token_ids`, each row the same;
    None when neither is given (the runner then draws random ids). Also the tokenizer, if any.
    """
    tokenizer = load_tokenizer(model_path)
    if prompt is not None and token_ids is not None:
        raise PromptError("give a prompt or token ids, not both")
    if prompt is not None:
        if tokenizer is None:
            raise PromptError(
                f"no usable tokenizer in {model_path or 'model_path (unset)'} "
                "(needs tokenizer files and transformers or tokenizers installed); "
                "pass token ids instead"
            )
        ids = tokenizer.encode(prompt)
        if not ids:
            raise PromptError(f"prompt {prompt!r} encodes to no tokens")
        bad = [i for i in ids if not 0 <= i < vocab_size]
        if bad:
            raise PromptError(f"tokenizer ids {bad[:5]} outside the vocabulary [0, {vocab_size})")
    elif token_ids is not None:
        ids = parse_token_ids(token_ids, vocab_size)
    else:
        return None, tokenizer
    return torch.tensor([ids] * batch_size, dtype=torch.long), tokenizer
