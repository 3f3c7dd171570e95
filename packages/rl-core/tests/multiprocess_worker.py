"""Worker for test_multiprocess.py: the same tree-packed steps in one process (imported by the
test) or under ``accelerate launch --multi_gpu --num_processes 2`` on CPU (gloo).

``python multiprocess_worker.py OUT steps`` — GRPO step 1 (gradients recorded), sharded
checkpoint, HF export, GRPO step 2, and one PPO step (value head, whitened advantages);
``python multiprocess_worker.py OUT resume`` — a fresh, differently initialised trainer loads
OUT/ckpt and runs GRPO step 2 again. Rank 0 writes OUT/<mode>.safetensors + OUT/<mode>.json.

``fsdp-steps`` / ``fsdp-resume``: the same with ``TrainerConfig.fsdp`` (FSDP2-sharded policy,
KL reference, value head or critic; full tensors gathered from the shards), plus PPO with a
critic through its value warm-up, and FSDP against DDP with two minibatches, two epochs and
an SFT step (checkpoint OUT/ckpt-fsdp, export OUT/hf-fsdp).
"""

from __future__ import annotations

import dataclasses
import os
import random
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import torch
from accelerate import Accelerator
from accelerate.utils import InitProcessGroupKwargs
from clawrl.prefixtree import PackedTree
from clawrl.rl_core import (
    CorrectionConfig,
    Critic,
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
from torch.distributed.tensor import DTensor

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
    tensors, info = MODES[mode](out)
    _phase(f"{mode} returned")
    info["seconds"] = time.perf_counter() - t0
    if os.environ.get("RANK", "0") == "0":  # the trainers are closed: ask the launcher's env
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / f"{mode}.safetensors"))
        (out / f"{mode}.json").write_bytes(orjson.dumps(info))
    else:
        # Every rank's work is done and the process group is destroyed (Trainer.close). A
        # non-main rank's interpreter teardown was suspected of the rare SIGABRT ("terminate
        # called without an active exception") seen in fresh-clone CI runs of 2026-12-04;
        # skipping it did not end the aborts (test_multiprocess.LAUNCH_ATTEMPTS), and it
        # costs nothing: skip it.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


# ------------------------------------------------------------------ FSDP (TrainerConfig.fsdp)
def _full(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor of an FSDP shard (a collective), a plain tensor as it is."""
    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().clone()


def make_fsdp_trainer(
    algorithm: str = "grpo",
    init_seed: int = 0,
    *,
    fsdp: bool = True,
    with_ref: bool = True,
    critic: bool = False,
    num_minibatches: int = 1,
    update_epochs: int = 1,
) -> Trainer:
    """A float64 trainer with a clipped gradient norm, entropy bonus, TIS and (``with_ref``)
    a KL term to a sharded reference policy; ``fsdp=False``: the DDP path."""
    cfg = TrainerConfig(
        algorithm=algorithm,  # type: ignore[arg-type]
        seed=3,
        token_budget=24,
        num_minibatches=num_minibatches,
        update_epochs=update_epochs,
        optim=OptimConfig(
            lr=1e-2, max_grad_norm=0.5, weight_decay=0.01, schedule="linear", total_steps=8
        ),
        loss=LossConfig(entropy_coef=0.01, kl_coef=0.05 if with_ref else 0.0),
        corrections=CorrectionConfig(tis_cap=2.0),
        ppo=PPOConfig(whiten_advantages=True, value_warmup_steps=1 if critic else 0),
        fsdp=fsdp,
    )
    ref = make_tiny_qwen3(torch.float64, seed=7) if with_ref else None
    crit = Critic(make_tiny_qwen3(torch.float64, seed=9)).double() if critic else None
    policy = make_tiny_qwen3(torch.float64, seed=init_seed)
    acc = None
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # the first one sets up the process group:
        # a rank left waiting in a collective (unequal forwards) fails in 2 min, not hangs
        timeout = InitProcessGroupKwargs(timeout=timedelta(seconds=120))
        acc = Accelerator(cpu=True, kwargs_handlers=[timeout])
    return Trainer(policy, cfg, ref_model=ref, critic=crit, accelerator=acc)


def _named(trainer: Trainer) -> dict[int, str]:
    names = {id(p): f"policy_model.{n}" for n, p in trainer.unwrapped.named_parameters()}
    if trainer.critic is not None:
        names |= {id(p): f"critic.{n}" for n, p in trainer.critic.named_parameters()}
    return names


def _record_full_grads(trainer: Trainer, into: dict[str, torch.Tensor], tag: str) -> None:
    """The gradients of the first optimiser step, whole (after the reduce-scatter)."""
    names = _named(trainer)

    def hook(opt: Any, args: Any, kwargs: Any) -> None:
        if any(k.startswith(f"{tag}.") for k in into):
            return
        for group in opt.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    into[f"{tag}.{names[id(p)]}"] = _full(p.grad)

    trainer._plain_optimizer().register_step_pre_hook(hook)


def _full_params(trainer: Trainer, tag: str) -> dict[str, torch.Tensor]:
    mods: list[tuple[str, torch.nn.Module]] = [("policy_model", trainer.unwrapped)]
    if trainer.critic is not None:
        mods.append(("critic", trainer.critic))
    return {f"{tag}.{m}.{n}": _full(p) for m, mod in mods for n, p in mod.named_parameters()}


def _metrics(stats: dict[str, float]) -> dict[str, float]:
    keys = ("loss", "policy_loss", "entropy", "kl", "value_loss", "grad_norm", "lr")
    return {k: stats[k] for k in keys if k in stats}


def run_fsdp_steps(out: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    tensors: dict[str, torch.Tensor] = {}
    info: dict[str, Any] = {}
    t = make_fsdp_trainer()
    info["fsdp"] = t.fsdp
    _record_full_grads(t, tensors, "grad")
    trees, rewards = rank0_batch(t, 1)
    info["step1"] = _metrics(t.rl_step(trees, rewards))
    tensors.update(_full_params(t, "after1"))
    t.save_checkpoint(out / "ckpt-fsdp", data_position=1)
    t.export_hf(out / "hf-fsdp")
    trees2, rewards2 = rank0_batch(t, 2)
    info["step2"] = _metrics(t.rl_step(trees2, rewards2))
    tensors.update(_full_params(t, "after2"))
    # PPO with the value head (in the policy's root FSDP group)
    ppo = make_fsdp_trainer("ppo", with_ref=False)
    _record_full_grads(ppo, tensors, "ppo_grad")
    info["ppo"] = _metrics(ppo.rl_step(trees, rewards))
    # PPO with a sharded critic: step 1 trains the critic alone (the policy runs without
    # autograd), step 2 both
    crit = make_fsdp_trainer("ppo", with_ref=False, critic=True)
    info["critic1"] = _metrics(crit.rl_step(trees, rewards))
    tensors.update(_full_params(crit, "critic_after1"))
    _record_full_grads(crit, tensors, "critic_grad2")
    info["critic2"] = _metrics(crit.rl_step(trees2, rewards2))
    tensors.update(_full_params(crit, "critic_after2"))
    # FSDP against DDP (in one process both are the plain trainer): two minibatches per
    # epoch, two epochs (minibatch k is padded to the ranks' largest k-th), then SFT
    for name, fsdp in (("mb_fsdp", True), ("mb_ddp", False)):
        mb = make_fsdp_trainer(with_ref=False, fsdp=fsdp, num_minibatches=2, update_epochs=2)
        info[name] = _metrics(mb.rl_step(trees, rewards))
        info[f"{name}_sft"] = _metrics(mb.sft_step(trees2))
        tensors.update(_full_params(mb, name))
    info["world_size"] = t.accelerator.num_processes
    t.close()
    return tensors, info


def _phase(name: str) -> None:
    """Say on stderr where this rank is (the launch log tells where a rank died)."""
    print(f"[rank {os.environ.get('RANK', '0')}] {name}", file=sys.stderr, flush=True)


def run_fsdp_resume(out: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    t = make_fsdp_trainer(init_seed=5)  # other weights: the checkpoint must replace them
    state = t.load_checkpoint(out / "ckpt-fsdp")
    _phase("loaded")
    trees2, rewards2 = rank0_batch(t, 2)
    info = {"step2": _metrics(t.rl_step(trees2, rewards2)), "fsdp": t.fsdp}
    _phase("stepped")
    info["data_position"] = state["data_position"]
    info["world_size"] = t.accelerator.num_processes
    tensors = _full_params(t, "after2")
    t.close()
    _phase("closed")
    return tensors, info


MODES = {
    "steps": run_steps,
    "resume": run_resume,
    "fsdp-steps": run_fsdp_steps,
    "fsdp-resume": run_fsdp_resume,
}


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(Path(sys.argv[1]), sys.argv[2])
