"""Run a package on several CPU ranks (gloo) in one test: `run_ranks` spawns one process
per rank with the variables torchrun would set, and returns what each rank's worker
saved. `greedy_on_ranks` is the worker the parallel tests use: load a checkpoint split
over the ranks, compile decode as the package's YAML says, decode greedily, and report
the logits, the graph counts and the rank's memory."""

from __future__ import annotations

import importlib
import os
import socket
import sys
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(world_size: int, worker, out_dir: Path, *args) -> list[dict[str, Any]]:
    """`worker(rank, *args)` on `world_size` spawned processes, each with RANK, WORLD_SIZE,
    LOCAL_RANK, MASTER_ADDR and MASTER_PORT set; returns each rank's saved dict. A rank
    that raises fails the call (torch.multiprocessing.spawn ends the others)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    mp.spawn(
        _rank_main,
        args=(world_size, free_port(), worker, str(out_dir), list(sys.path), args),
        nprocs=world_size,
        join=True,
    )
    return [torch.load(out_dir / f"rank{r}.pt") for r in range(world_size)]


def _rank_main(rank, world_size, port, worker, out_dir, path, args) -> None:
    sys.path[:] = path
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
    )
    torch.set_num_threads(1)  # two ranks on a 2-core host
    result = worker(rank, *args)
    torch.save(result, Path(out_dir) / f"rank{rank}.pt")
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def greedy_on_ranks(
    rank: int,
    package: str,
    checkpoint: str,
    config_path: str,
    sizes: dict[str, int],
    prompt: list[list[int]],
    steps: int,
    kv_cache_tokens: int | None,
) -> dict[str, Any]:
    """One rank of a parallel greedy decode (run_ranks' worker)."""
    from .. import ops
    from ..config import ParallelConfig, load_config
    from ..graph import compile_decode, graph_break_count, graph_count
    from ..parallel import init_parallel
    from ..parallel_sizes import check_parallel
    from ..weights import load_pretrained, model_args_from_hf
    from .kit import greedy

    spec = importlib.import_module(package).MODEL
    world = int(os.environ["WORLD_SIZE"])
    config = ParallelConfig(world_size=world, **sizes)
    check_parallel(model_args_from_hf(spec, checkpoint), config)
    parallel = init_parallel(config)
    model = load_pretrained(
        spec,
        checkpoint,
        ops.load("portable"),
        batch_size=len(prompt),
        kv_cache_tokens=kv_cache_tokens,
        parallel=parallel,
    )
    model_config = load_config(config_path).model_config
    decode = compile_decode(model, model_config)
    graphs, breaks = graph_count(), graph_break_count()
    logits = greedy(model, decode, torch.tensor(prompt), steps, model_config.tensor_lengths)
    attn = next(iter(model.attention_modules()))
    return {
        "rank": rank,
        "logits": torch.cat(logits, dim=1),
        "graphs": graph_count() - graphs,
        "breaks": graph_break_count() - breaks,
        "weight_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "cache_bytes": sum(t.numel() * t.element_size() for t in _cache_tensors(model)),
        "heads": getattr(attn, "num_heads", None),
        "kv_heads": getattr(attn, "num_kv_heads", None),
    }


def _cache_tensors(model) -> list[torch.Tensor]:
    return [t for attn in model.attention_modules() for t in attn.kv_cache.buffers()]
