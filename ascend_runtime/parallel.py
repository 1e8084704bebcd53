"""Tensor and expert parallelism over torch.distributed, in cann-recipes-infer's terms.

The sizes are the YAML's parallel_config: `world_size`, `attn_tp_size` (attention heads),
`dense_tp_size` (dense MLPs), `moe_tp_size` (the experts' intermediate size; expert
parallel size = world_size / moe_tp_size), `embed_tp_size` and `lmhead_tp_size` (the
vocabulary). Each group is a block of consecutive ranks, as cann-recipes-infer's
executor/core/config/comm_manager.py builds them for stride 1; every rank sees the same
batch (no data parallel), so a rank outside a dimension's group computes the same values.

Layers never communicate (layers/linear.py shards them at load); the model calls the
collectives itself: `Group.all_reduce` after o_proj and after down_proj (in the decoder
layer), after the vocab-parallel embedding, and `Group.all_gather_last` after the
lm_head. Under dynamo the in-place c10d calls trace to functional collectives, so they
sit inside the one decode graph.

Launch, one process per device:
- torchrun: `torchrun --nproc-per-node N -m <pkg>.runner --config ...` (RANK, WORLD_SIZE,
  LOCAL_RANK, MASTER_ADDR/PORT; several nodes through torchrun's --nnodes/--rdzv-endpoint);
- cann-recipes-infer's launcher (executor/scripts/function.sh, executor/offline/infer.py):
  LOCAL_RANK, RANK_OFFSET (global rank = LOCAL_RANK + RANK_OFFSET), WORLD_SIZE,
  MASTER_ADDR, MASTER_PORT.
On an NPU the device is set before HCCL is initialised (cann-recipes-infer's
ExecutionEngine._init_device); on CPU the backend is gloo.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from .config import ConfigError, InputError, ParallelConfig

T = TypeVar("T")
# How long a collective waits for a rank that never arrives before every rank fails
# (seconds); a rank that fails before the first collective is reported at once (`agree`).
TIMEOUT_ENV = "ASCEND_SCAFFOLD_DIST_TIMEOUT"
DEFAULT_TIMEOUT_S = 600


@dataclass(frozen=True)
class Group:
    """One parallel dimension as this rank sees it: `size` ranks, this one `rank` among
    them, and the process group (None: size 1, or every rank)."""

    size: int = 1
    rank: int = 0
    group: Any = None

    def part(self, full: int) -> tuple[int, int]:
        """(start, length) of this rank's equal share of `full` (divisibility is checked
        with the sizes, check_parallel)."""
        length = full // self.size
        return self.rank * length, length

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum of `x` over the group, in place (nothing at size 1)."""
        if self.size > 1:
            dist.all_reduce(x, group=self.group)
        return x

    def all_gather_last(self, x: torch.Tensor) -> torch.Tensor:
        """Every rank's `x` concatenated on the last dim (a vocab-sharded lm_head's logits).
        Gathered into one concatenated [size * rows, n] buffer, then reordered: dynamo
        rejects a stacked [size, rows, n] output buffer (shared/design notes §7.2)."""
        if self.size == 1:
            return x
        rows = x.reshape(-1, x.shape[-1]).contiguous()
        out = rows.new_empty((self.size * rows.shape[0], rows.shape[1]))
        # all_gather_single: torch 2.13's name for all_gather_into_tensor (deprecated there);
        # dynamo remaps both to the functional all_gather (traceable_collective_remaps).
        dist.all_gather_single(out, rows, group=self.group)
        out = out.view(self.size, *rows.shape).permute(1, 0, 2)
        return out.reshape(*x.shape[:-1], self.size * x.shape[-1])


SINGLE_GROUP = Group()


@dataclass(frozen=True)
class Parallel:
    """This rank's groups. `moe` is every rank: each holds a part of every MoE layer
    (an intermediate-size shard of world_size / moe_tp_size experts), so one all_reduce
    over all of them combines a MoE layer, shared experts included."""

    world: Group = SINGLE_GROUP
    attn_tp: Group = SINGLE_GROUP
    dense_tp: Group = SINGLE_GROUP
    moe_tp: Group = SINGLE_GROUP
    moe_ep: Group = SINGLE_GROUP
    embed_tp: Group = SINGLE_GROUP
    lmhead_tp: Group = SINGLE_GROUP
    local_rank: int = 0
    host_group: Any = field(default=None, compare=False)  # gloo: host-side agreement

    @property
    def moe(self) -> Group:
        return self.world

    @property
    def distributed(self) -> bool:
        return self.world.size > 1

    @property
    def is_first(self) -> bool:
        """Rank 0: the one that prints."""
        return self.world.rank == 0

    def agree(self, error: str | None) -> None:
        """Every rank says whether its part so far failed; when one did, every rank raises
        RankFailed naming the first failed rank and its message, so none goes on into a
        collective the failed rank never joins (it would wait until the timeout)."""
        if not self.distributed:
            return
        said: list[str | None] = [None] * self.world.size
        dist.all_gather_object(said, error, group=self.host_group)
        for rank, message in enumerate(said):
            if message is not None:
                raise RankFailed(rank, message)


SINGLE = Parallel()


class RankFailed(InputError):
    """Another rank (or this one) failed; every rank exits with its message."""

    def __init__(self, rank: int, message: str):
        super().__init__(f"rank {rank}: {message}")
        self.rank = rank


def on_every_rank(parallel: Parallel, step: Callable[[], T]) -> T:
    """`step()` on this rank, then `agree`: a failure on any rank (bad input, a missing
    file, a bug) fails every rank before any of them reaches a collective."""
    try:
        result = step()
    except Exception as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        parallel.agree(message)
        raise  # one rank alone: its own error, as without parallelism
    parallel.agree(None)
    return result


@dataclass(frozen=True)
class Launch:
    rank: int
    world_size: int
    local_rank: int


def _env_int(name: str, default: int | None = None) -> int | None:
    text = os.environ.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"environment variable {name}={text!r} must be an integer") from None
    if value < 0:
        raise ConfigError(f"environment variable {name}={value} must be >= 0")
    return value


def launch_environment() -> Launch | None:
    """The rank this process is, from torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK)
    or cann-recipes-infer's (LOCAL_RANK + RANK_OFFSET, WORLD_SIZE); None when neither
    launched it."""
    world = _env_int("WORLD_SIZE")
    if world is None:
        return None
    local = _env_int("LOCAL_RANK", 0)
    rank = _env_int("RANK")
    if rank is None:  # cann-recipes-infer: executor/offline/infer.py
        rank = local + _env_int("RANK_OFFSET", 0)
    if world < 1 or rank >= world:
        raise ConfigError(f"rank {rank} is outside WORLD_SIZE {world} (launcher environment)")
    return Launch(rank, world, local)


def _launch_hint(world: int) -> str:
    return (
        f"launch {world} processes, one per device: torchrun --nproc-per-node {world} -m "
        "<package>.runner --config <yaml>, or set LOCAL_RANK, RANK_OFFSET, WORLD_SIZE, "
        "MASTER_ADDR and MASTER_PORT for each (the package's README, 'Run on several devices')"
    )


def init_parallel(config: ParallelConfig, device_type: str = "cpu") -> Parallel:
    """Join the process group the launcher set up and build this rank's groups (SINGLE for
    world_size 1). ConfigError, one line, when the launch and the YAML disagree."""
    launch = launch_environment()
    world = config.world_size
    if world == 1:
        if launch is not None and launch.world_size > 1:
            raise ConfigError(
                f"{launch.world_size} processes were launched but parallel_config.world_size "
                "is 1: set it (and the TP sizes) in the YAML, or launch one process"
            )
        return SINGLE
    if launch is None:
        raise ConfigError(f"parallel_config.world_size is {world}: {_launch_hint(world)}")
    if launch.world_size != world:
        raise ConfigError(
            f"parallel_config.world_size is {world} but {launch.world_size} processes were "
            "launched (WORLD_SIZE)"
        )
    missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name)]
    if missing:
        raise ConfigError(f"{' and '.join(missing)} not set: {_launch_hint(world)}")
    if device_type == "npu":  # the device first, then HCCL (ExecutionEngine._init_device)
        torch.npu.set_device(launch.local_rank)
        backend = "hccl"
    else:
        backend = "gloo"
    timeout = timedelta(seconds=_env_int(TIMEOUT_ENV, DEFAULT_TIMEOUT_S) or DEFAULT_TIMEOUT_S)
    if not dist.is_initialized():
        dist.init_process_group(
            backend, rank=launch.rank, world_size=world, timeout=timeout, init_method="env://"
        )
    host_group = dist.new_group(backend="gloo", timeout=timeout) if backend != "gloo" else None
    return build_groups(config, launch.rank, launch.local_rank, host_group)


def build_groups(
    config: ParallelConfig, rank: int, local_rank: int = 0, host_group: Any = None
) -> Parallel:
    """This rank's groups for the sizes (the default process group must exist). Every rank
    creates every group, in the same order, as torch.distributed.new_group requires."""
    world = config.world_size
    moe_ep = world // config.moe_tp_size

    def blocks(size: int) -> Group:
        return _group([list(range(s, s + size)) for s in range(0, world, size)], rank, world)

    # Expert parallel: the ranks with the same moe_tp rank (stride moe_tp_size).
    ep_ranks = [list(range(t, world, config.moe_tp_size)) for t in range(config.moe_tp_size)]
    return Parallel(
        world=Group(world, rank),
        attn_tp=blocks(config.attn_tp_size),
        dense_tp=blocks(config.dense_tp_size),
        moe_tp=blocks(config.moe_tp_size),
        moe_ep=_group(ep_ranks, rank, world) if moe_ep > 1 else SINGLE_GROUP,
        embed_tp=blocks(config.embed_tp_size),
        lmhead_tp=blocks(config.lmhead_tp_size),
        local_rank=local_rank,
        host_group=host_group,
    )


def _group(partition: list[list[int]], rank: int, world: int) -> Group:
    size = len(partition[0])
    if size == 1:
        return SINGLE_GROUP
    if size == world:
        return Group(size, rank)  # the default group
    mine = None
    for ranks in partition:
        group = dist.new_group(ranks)
        if rank in ranks:
            mine = Group(size, ranks.index(rank), group)
    return mine


def local_kv_heads(num_kv_heads: int, group: Group) -> tuple[int, int]:
    """(heads this rank holds, index of its first) for `num_kv_heads` split over `group`;
    with fewer KV heads than ranks each rank holds one, shared by size / kv ranks (vLLM's
    rule, cann-recipes-infer's `max(kv // tp, 1)`)."""
    if num_kv_heads >= group.size:
        start, length = group.part(num_kv_heads)
        return length, start
    return 1, group.rank // (group.size // num_kv_heads)
