"""Sharded checkpoints for multi-process runs, with ``torch.distributed.checkpoint`` (DCP).

Directory layout::

    dcp/.metadata, dcp/__<rank>_0.distcp   model (+ critic) and optimizer state, every rank
                                           writing its share (DCP's planner deals replicated
                                           tensors over ranks; FSDP shards stay shards)
    rng-<rank>.safetensors, rng-<rank>.json   each rank's torch / NumPy / Python RNG
    trainer_state.json                     rank 0: step, policy version, data position,
                                           scheduler, world size, the resolved config,
                                           whether the optimizer had no state yet

State dicts come from ``torch.distributed.checkpoint.state_dict.get_state_dict`` (fully
qualified parameter names, no wrapper prefixes), so the same files load under DDP, FSDP2 or
one process, at any world size; RNG streams are restored only for ranks that saved one.
No pickles: DCP writes tensors and its own metadata.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import orjson
import torch
import torch.distributed.checkpoint as dcp
from clawrl.rl_core.checkpoint import _rng_state, _set_rng_state
from clawrl.rl_core.errors import CheckpointError
from safetensors.torch import load_file, save_file
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

__all__ = ["is_sharded_checkpoint", "load_sharded_checkpoint", "save_sharded_checkpoint"]


def is_sharded_checkpoint(path: str | Path) -> bool:
    """True if ``path`` holds a checkpoint written by :func:`save_sharded_checkpoint`."""
    return (Path(path) / "dcp" / ".metadata").is_file()


def save_sharded_checkpoint(
    path: str | Path,
    *,
    modules: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    state: dict[str, Any],
    rank: int,
    world_size: int,
) -> Path:
    """Collective: every rank calls it with the same ``path``.

    Args:
        modules: one module holding every trained module (e.g. an ``nn.ModuleDict`` of the
            unwrapped policy and critic); its parameters are the optimizer's.
        optimizer: the plain ``torch.optim`` optimizer (not accelerate's wrapper).
        state: JSON-serialisable trainer state, written by rank 0.
    """
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    # get_state_dict gives an optimizer without state one by an lr-0 step (AdamW's step
    # count becomes 1, so the first real step's bias correction would be step 2's): undone
    fresh = not optimizer.state
    msd, osd = get_state_dict(modules, optimizers=optimizer)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=str(out / "dcp"))
    if fresh:
        optimizer.state.clear()
    rt, rm = _rng_state()
    save_file(rt, str(out / f"rng-{rank}.safetensors"))
    (out / f"rng-{rank}.json").write_bytes(orjson.dumps(rm))
    if rank == 0:
        full = {
            **state,
            "format": "dcp",
            "world_size": world_size,
            "optimizer_fresh": fresh,
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
        }
        (out / "trainer_state.json").write_bytes(
            orjson.dumps(full, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_INDENT_2)
        )
    return out


def load_sharded_checkpoint(
    path: str | Path,
    *,
    modules: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    rank: int,
    restore_rng: bool = True,
) -> dict[str, Any]:
    """Load a directory written by :func:`save_sharded_checkpoint` (collective when a
    process group is up; also works in one process).

    Returns:
        the trainer state dict.

    Raises:
        CheckpointError: a missing file, or state that does not match the modules.
    """
    src = Path(path)
    if not is_sharded_checkpoint(src) or not (src / "trainer_state.json").is_file():
        raise CheckpointError(f"{src} is not a sharded checkpoint (dcp/.metadata, trainer_state)")
    try:
        state: dict[str, Any] = orjson.loads((src / "trainer_state.json").read_bytes())
        msd, osd = get_state_dict(modules, optimizers=optimizer)
        both: dict[str, Any] = {"model": msd, "optim": osd}
        # one process (no process group): DCP reads every rank's shards itself, and says so
        # in a warning on every load
        dist = torch.distributed.is_available() and torch.distributed.is_initialized()
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.load(both, checkpoint_id=str(src / "dcp"), no_dist=not dist)
        set_state_dict(
            modules, optimizer, model_state_dict=both["model"], optim_state_dict=both["optim"]
        )
        if state.get("optimizer_fresh"):  # saved before any step: no state, as then
            optimizer.state.clear()
        if scheduler is not None and state.get("scheduler") is not None:
            scheduler.load_state_dict(state["scheduler"])
        rng_file = src / f"rng-{rank}.safetensors"
        if restore_rng and rng_file.is_file():
            meta = orjson.loads((src / f"rng-{rank}.json").read_bytes())
            _set_rng_state(load_file(str(rng_file)), meta)
    except (RuntimeError, ValueError, KeyError) as exc:
        raise CheckpointError(f"cannot load sharded checkpoint {src}: {exc}") from exc
    return state
