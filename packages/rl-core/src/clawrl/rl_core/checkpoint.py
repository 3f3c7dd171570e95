"""Checkpoints as safetensors + JSON (no pickles): model, optimizer, scheduler, RNG, step.

Directory layout::

    model.safetensors          policy (+ value head) state dict
    critic.safetensors         separate critic, if any
    optimizer.safetensors      every tensor of the optimizer state ("state.<param>.<name>")
    optimizer.json             param_groups and non-tensor optimizer state
    rng.safetensors            torch CPU (and CUDA) generator states, numpy MT19937 key
    trainer_state.json         step, policy version, data position, scheduler state,
                               python/numpy RNG scalars, the resolved config

Written single-process (rank 0) from full state dicts; loading puts every tensor back
bit-exactly, so resuming reproduces an uninterrupted run on CPU.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import torch
from clawrl.rl_core.errors import CheckpointError
from safetensors.torch import load_file, load_model, save_file, save_model
from torch import nn

__all__ = ["load_checkpoint", "save_checkpoint"]

_FILES = (
    "model.safetensors",
    "optimizer.safetensors",
    "optimizer.json",
    "rng.safetensors",
    "trainer_state.json",
)


def _optimizer_to_files(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], Any]:
    sd = opt.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    meta: dict[str, Any] = {"param_groups": sd["param_groups"], "state": {}}
    for pid, st in sd["state"].items():
        meta["state"][str(pid)] = {}
        for k, v in st.items():
            if torch.is_tensor(v):
                tensors[f"state.{pid}.{k}"] = v.detach().contiguous().cpu()
            else:
                meta["state"][str(pid)][k] = v
    return tensors, meta


def _optimizer_from_files(
    opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: Any
) -> None:
    state: dict[int, dict[str, Any]] = {int(k): dict(v) for k, v in meta["state"].items()}
    for key, t in tensors.items():
        _, pid, name = key.split(".", 2)
        state.setdefault(int(pid), {})[name] = t
    groups = meta["param_groups"]
    for g in groups:
        if isinstance(g.get("betas"), list):
            g["betas"] = tuple(g["betas"])
    opt.load_state_dict({"state": state, "param_groups": groups})


def _rng_state() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    tensors = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"torch_cuda_{i}"] = s
    name, keys, pos, has_gauss, cached = np.random.get_state()
    tensors["numpy_keys"] = torch.as_tensor(np.asarray(keys, dtype=np.int64))
    py = random.getstate()
    meta = {
        "numpy": [name, int(pos), int(has_gauss), float(cached)],
        "python": [py[0], list(py[1]), py[2]],
    }
    return tensors, meta


def _set_rng_state(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    torch.set_rng_state(tensors["torch_cpu"])
    cuda = sorted(k for k in tensors if k.startswith("torch_cuda_"))
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([tensors[k] for k in cuda])
    name, pos, has_gauss, cached = meta["numpy"]
    np.random.set_state(
        (name, tensors["numpy_keys"].numpy().astype(np.uint32), pos, has_gauss, cached)
    )
    v, st, gauss = meta["python"]
    random.setstate((v, tuple(st), gauss))


def save_checkpoint(
    path: str | Path,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    state: dict[str, Any],
    critic: nn.Module | None = None,
) -> Path:
    """Write a checkpoint directory (created if missing; files overwritten).

    Args:
        model: the (unwrapped) policy module, e.g. a ``TreeModel``.
        optimizer, scheduler: their ``state_dict`` s are saved.
        state: JSON-serialisable trainer state (step, policy version, data position, config).
        critic: a separate critic module.

    Returns:
        the directory.
    """
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    save_model(model, str(out / "model.safetensors"))
    if critic is not None:
        save_model(critic, str(out / "critic.safetensors"))
    ot, om = _optimizer_to_files(optimizer)
    save_file(ot, str(out / "optimizer.safetensors"))
    (out / "optimizer.json").write_bytes(orjson.dumps(om, option=orjson.OPT_SERIALIZE_NUMPY))
    rt, rm = _rng_state()
    save_file(rt, str(out / "rng.safetensors"))
    full = {
        **state,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "rng": rm,
    }
    (out / "trainer_state.json").write_bytes(
        orjson.dumps(full, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_INDENT_2)
    )
    return out


def load_checkpoint(
    path: str | Path,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    critic: nn.Module | None = None,
    restore_rng: bool = True,
) -> dict[str, Any]:
    """Load a directory written by :func:`save_checkpoint` into the given objects.

    Returns:
        the trainer state dict (step, policy version, data position, config, ...).

    Raises:
        CheckpointError: a file is missing or does not match the model/optimizer.
    """
    src = Path(path)
    missing = [f for f in _FILES if not (src / f).is_file()]
    if critic is not None and not (src / "critic.safetensors").is_file():
        missing.append("critic.safetensors")
    if missing:
        raise CheckpointError(f"checkpoint {src} is missing {missing}")
    try:
        bad = load_model(model, str(src / "model.safetensors"), strict=True)
        if critic is not None:
            load_model(critic, str(src / "critic.safetensors"), strict=True)
        if bad[0] or bad[1]:
            raise CheckpointError(f"model keys differ: missing {bad[0]}, unexpected {bad[1]}")
        dev = next(model.parameters()).device
        _optimizer_from_files(
            optimizer,
            load_file(str(src / "optimizer.safetensors"), device=str(dev)),
            orjson.loads((src / "optimizer.json").read_bytes()),
        )
        state: dict[str, Any] = orjson.loads((src / "trainer_state.json").read_bytes())
        if scheduler is not None and state.get("scheduler") is not None:
            scheduler.load_state_dict(state["scheduler"])
        if restore_rng:
            _set_rng_state(load_file(str(src / "rng.safetensors")), state["rng"])
    except (RuntimeError, ValueError, KeyError) as exc:
        raise CheckpointError(f"cannot load checkpoint {src}: {exc}") from exc
    return state
