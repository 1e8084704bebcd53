"""Whether a model splits as parallel_config says: arithmetic on ModelArgs and the sizes,
no torch, so the scaffold checks its interview's answers with the same function the runner
checks a YAML with (ascend_runtime.parallel builds the groups)."""

from __future__ import annotations

from .config import ConfigError, ParallelConfig
from .hf_config import moe_layers


def check_parallel(args, config: ParallelConfig) -> None:
    """ConfigError (one line) when the model cannot be split as the sizes say: attention
    heads over attn_tp_size (KV heads split, or replicated when there are fewer than
    ranks), the dense MLPs' intermediate size over dense_tp_size, the experts over the
    expert-parallel size and their intermediate size over moe_tp_size, shared experts over
    every rank, the vocabulary over embed_tp_size and lmhead_tp_size (not padded)."""
    config.validate()
    world = config.world_size
    if world == 1:
        return
    problems = []

    def needs(what: str, value: int, size: int, key: str) -> None:
        if value % size:
            problems.append(f"{what} ({value}) is not divisible by {key} ({size})")

    tp = config.attn_tp_size
    needs("num_attention_heads", args.num_attention_heads, tp, "attn_tp_size")
    if args.family != "mla":
        kv = args.num_key_value_heads
        if (kv % tp if kv >= tp else tp % kv) and not problems:
            problems.append(
                f"num_key_value_heads ({kv}) must divide attn_tp_size ({tp}) to be replicated, "
                "or be divisible by it"
            )
    if args.family == "dense" or len(moe_layers(args)) < args.num_hidden_layers:
        needs("intermediate_size", args.intermediate_size, config.dense_tp_size, "dense_tp_size")
    if args.family != "dense":
        ep = world // config.moe_tp_size
        if args.num_experts % ep:
            problems.append(
                f"num_experts ({args.num_experts}) is not divisible by the expert-parallel "
                f"size, world_size / moe_tp_size = {world} / {config.moe_tp_size} = {ep}"
            )
        needs("moe_intermediate_size", args.moe_intermediate_size, config.moe_tp_size,
              "moe_tp_size")  # fmt: skip
        shared = _shared_width(args)
        if shared:
            needs("the shared experts' intermediate size", shared, world, "world_size")
    needs("vocab_size", args.vocab_size, config.embed_tp_size, "embed_tp_size")
    needs("vocab_size", args.vocab_size, config.lmhead_tp_size, "lmhead_tp_size")
    if args.tie_word_embeddings and config.embed_tp_size != config.lmhead_tp_size:
        problems.append(
            f"tied embeddings share one weight: embed_tp_size ({config.embed_tp_size}) and "
            f"lmhead_tp_size ({config.lmhead_tp_size}) must be equal"
        )
    if problems:
        raise ConfigError(f"parallel_config: {problems[0]}")


def _shared_width(args) -> int:
    if args.family == "mla":
        return args.n_shared_experts * args.moe_intermediate_size
    return getattr(args, "shared_expert_intermediate_size", 0)
