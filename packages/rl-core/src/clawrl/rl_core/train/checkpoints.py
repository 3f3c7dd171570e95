"""The loop's checkpoints: ``<run.out>/checkpoints/step-NNNNNN`` (the trainer's state and the
loop's :class:`LoopState`), written atomically, with a ``latest`` pointer file, and the KL
reference policy saved once beside them."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from clawrl.rl_core.trainer import Trainer

__all__ = ["LoopState", "latest_checkpoint", "load_reference_policy", "save_checkpoint"]


@dataclass
class LoopState:
    """What a checkpoint stores besides the trainer: where the loop is."""

    next_step: int = 0
    policy_version: int = 0
    cold_start_done: bool = False
    evals: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(self.__dict__, indent=1)

    @classmethod
    def load(cls, checkpoint: Path) -> LoopState:
        """The loop state saved in ``checkpoint`` (``loop_state.json``)."""
        return cls(**json.loads((checkpoint / "loop_state.json").read_text()))


def latest_checkpoint(ckpt_dir: Path) -> Path | None:
    """The checkpoint ``ckpt_dir/latest`` names, or None (no pointer, or it names a folder
    without a loop state)."""
    ptr = ckpt_dir / "latest"
    if not ptr.exists():
        return None
    path = ckpt_dir / ptr.read_text().strip()
    return path if (path / "loop_state.json").exists() else None


def save_checkpoint(ckpt_dir: Path, trainer: Trainer, state: LoopState, keep: int) -> Path:
    """Write ``ckpt_dir/step-NNNNNN`` (``state.next_step``) atomically — trainer state +
    loop state in a temporary folder, then renamed — point ``latest`` at it and keep the
    newest ``keep`` checkpoints. Returns the checkpoint's path."""
    name = f"step-{state.next_step:06d}"
    tmp = ckpt_dir / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    trainer.save_checkpoint(tmp, data_position=state.next_step)
    (tmp / "loop_state.json").write_text(state.to_json())
    final = ckpt_dir / name
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    ptr_tmp = ckpt_dir / ".latest.tmp"
    ptr_tmp.write_text(name)
    os.replace(ptr_tmp, ckpt_dir / "latest")
    for p in sorted(p for p in ckpt_dir.glob("step-*") if p.is_dir())[:-keep]:
        shutil.rmtree(p, ignore_errors=True)
    return final


def load_reference_policy(
    ckpt_dir: Path,
    ref_model: torch.nn.Module,
    policy: torch.nn.Module,
    *,
    warn_missing: bool,
    say: Callable[[str], None],
) -> None:
    """The KL term's reference is the policy as RL started (after the cold start): saved
    once to ``ckpt_dir/ref_policy.safetensors``, loaded from there on resume (the freshly
    built model would be the pre-cold-start weights). ``warn_missing``: a resumed run past
    step 0 without the file (from before it was saved) says its reference is the resumed
    policy."""
    from safetensors.torch import load_model, save_model

    path = ckpt_dir / "ref_policy.safetensors"
    if path.exists():
        load_model(ref_model, str(path))
        return
    if warn_missing:
        say(
            f"warning: no {path.name} (a run from before it was saved): the KL "
            "reference is the resumed checkpoint's policy, not RL's start"
        )
    ref_model.load_state_dict(policy.state_dict())
    tmp = path.with_name(f".{path.name}.tmp")
    save_model(ref_model, str(tmp))
    os.replace(tmp, path)
