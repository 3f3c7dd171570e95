"""Worker for test_multiprocess.py: the same tree-packed steps in one process (imported by the
test) or under ``accelerate launch --multi_gpu --num_processes 2`` on CPU (gloo).

``python multiprocess_worker.py OUT steps`` — GRPO step 1 (gradients recorded), sharded
checkpoint, HF export, GRPO step 2, and one PPO step (value head, whitened advantages);
``python multiprocess_worker.py OUT resume`` — a fresh, differently initialised trainer loads
OUT/ckpt and runs GRPO step 2 again. Rank 0 writes OUT/<mode>.safetensors + OUT/<mode>.json.
"""

from __future__ import annotations

import dataclasses
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import torch
from clawrl.prefixtree import PackedTree
from clawrl.rl_core import (
    LossConfig,
    OptimConfig,
    PPOConfig,
    Trainer,
    TrainerConfig,
    broadcast_batch,
    pack_token_sequences,
)
from conftest import make_tiny_qwen3, random_sequences
from safetensors.torch import save_file

#: packed sizes differ a lot, so ranks get unequal token (and membership) counts
TREE_SEQS = (9, 2, 5, 3, 7)


def make_batch(seed: int) -> tuple[list[PackedTree], dict[str, float]]:
    """Random group trees (one GRPO group each, 2 rollouts) and a reward per rollout."""
    rng = random.Random(seed)
    trees, rewards = [], {}
    for i, n_seq in enumerate(TREE_SEQS):
        seqs = random_sequences(rng, n_seq, n_rollouts=2, n_groups=1)
        seqs = [
            dataclasses.replace(s, rollout_id=f"t{i}{s.rollout_id}", metadata={"group_id": f"{i}"})
            for s in seqs
        ]
        trees.append(pack_token_sequences(seqs))
        rewards.update({s.rollout_id: rng.random() for s in seqs})
    return trees, rewards


def make_trainer(algorithm: str = "grpo", init_seed: int = 0) -> Trainer:
    cfg = TrainerConfig(
        algorithm=algorithm,  # type: ignore[arg-type]
        seed=3,
        token_budget=24,  # several pieces per tree
        # a decaying schedule: one scheduler step per optimiser step on every rank
        optim=OptimConfig(
            lr=1e-2, max_grad_norm=None, weight_decay=0.01, schedule="linear", total_steps=4
        ),
        loss=LossConfig(entropy_coef=0.01),
        ppo=PPOConfig(whiten_advantages=True),
    )
    return Trainer(make_tiny_qwen3(torch.float64, seed=init_seed), cfg)


def rank0_batch(trainer: Trainer, seed: int) -> tuple[list[PackedTree], dict[str, float]]:
    """As the train loop: rank 0 makes the batch (its rollouts), the others receive it."""
    made = make_batch(seed) if trainer.accelerator.is_main_process else (None, None)
    return broadcast_batch(*made, trainer.accelerator)


def _record_grads(trainer: Trainer, into: dict[str, torch.Tensor]) -> None:
    """Keep the gradients the optimiser steps with (after the sum over ranks)."""
    names = {id(p): n for n, p in trainer.unwrapped.named_parameters()}

    def hook(opt: Any, args: Any, kwargs: Any) -> None:
        for group in opt.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    into[f"grad.{names[id(p)]}"] = p.grad.detach().clone()

    trainer._plain_optimizer().register_step_pre_hook(hook)


def _params(trainer: Trainer, tag: str) -> dict[str, torch.Tensor]:
    return {f"{tag}.{n}": p.detach().clone() for n, p in trainer.unwrapped.named_parameters()}


def run_steps(out: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    tensors: dict[str, torch.Tensor] = {}
    info: dict[str, Any] = {}
    t = make_trainer()
    _record_grads(t, tensors)
    trees, rewards = rank0_batch(t, 1)
    info["step1"] = t.rl_step(trees, rewards)
    tensors.update(_params(t, "after1"))
    t.save_checkpoint(out / "ckpt", data_position=1)
    t.export_hf(out / "hf")
    trees2, rewards2 = rank0_batch(t, 2)
    info["step2"] = t.rl_step(trees2, rewards2)
    tensors.update(_params(t, "after2"))
    ppo = make_trainer("ppo")
    ppo_grads: dict[str, torch.Tensor] = {}
    _record_grads(ppo, ppo_grads)
    info["ppo"] = ppo.rl_step(trees, rewards)
    tensors.update({f"ppo.{k}": v for k, v in ppo_grads.items()})
    info["world_size"] = t.accelerator.num_processes
    ppo.close()
    return tensors, info


def run_resume(out: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    t = make_trainer(init_seed=5)  # different weights: the checkpoint must replace them
    state = t.load_checkpoint(out / "ckpt")
    trees2, rewards2 = rank0_batch(t, 2)
    info = {"step2": t.rl_step(trees2, rewards2), "data_position": state["data_position"]}
    info["world_size"] = t.accelerator.num_processes
    t.close()
    return _params(t, "after2"), info


def main(out: Path, mode: str) -> None:
    t0 = time.perf_counter()
    tensors, info = (run_steps if mode == "steps" else run_resume)(out)
    info["seconds"] = time.perf_counter() - t0
    if os.environ.get("RANK", "0") == "0":  # the trainers are closed: ask the launcher's env
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / f"{mode}.safetensors"))
        (out / f"{mode}.json").write_bytes(orjson.dumps(info))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(Path(sys.argv[1]), sys.argv[2])
