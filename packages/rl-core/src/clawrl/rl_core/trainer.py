"""Trainer on accelerate: one process on CPU; ``accelerate launch`` (multi-GPU, FSDP) as is.

The trainer orchestrates; the math is in :mod:`advantages`, :mod:`losses`,
:mod:`corrections` and :mod:`step`. One call of :meth:`Trainer.rl_step` is one optimiser
step on a batch of packed trees:

1. split the forest into pieces of at most ``token_budget`` tokens;
2. no-grad pass in eval mode (dropout off; train mode restored after): π_old (and V_old,
   π_ref) per token;
3. advantages, corrections, aggregation weights on the membership list;
4. per epoch, shuffle the pieces into ``num_minibatches`` minibatches
   (:func:`minibatch_indices`); per minibatch, forward + backward per piece (gradients
   accumulate), clip the gradient norm, AdamW step, LR-schedule step; step and policy
   version + 1.
"""

from __future__ import annotations

import dataclasses
import random
import warnings
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from clawrl.prefixtree import PackedTree
from clawrl.rl_core.checkpoint import load_checkpoint, save_checkpoint
from clawrl.rl_core.config import Aggregation, TrainerConfig
from clawrl.rl_core.errors import ConfigError, MinibatchCapWarning
from clawrl.rl_core.forward import TreeModel
from clawrl.rl_core.packing import TreeBatch, TreePiece, split_by_token_budget
from clawrl.rl_core.step import (
    OldPass,
    PreparedRL,
    loss_backward,
    old_pass,
    prepare_rl,
    prepare_sft,
)
from clawrl.rl_core.value import Critic, ValueHead
from torch import nn
from transformers import get_scheduler

__all__ = ["Trainer", "minibatch_indices", "seed_everything"]


def seed_everything(seed: int) -> None:
    """Seed python ``random``, NumPy's global RNG and torch (CPU and CUDA)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def minibatch_indices(
    n_pieces: int, num_minibatches: int, *, seed: int, step: int, epoch: int
) -> list[np.ndarray]:
    """Piece indices of each minibatch: a permutation of ``range(n_pieces)`` drawn from
    ``numpy.random.default_rng([seed, step, epoch])`` (reproducible, independent of any
    global RNG, reshuffled every epoch and step), dealt into ``min(num_minibatches,
    n_pieces)`` near-equal parts (``numpy.array_split``), each sorted (DFS order inside).

    Returns:
        list of int64 arrays, disjoint, covering ``range(n_pieces)``.
    """
    rng = np.random.default_rng([seed % 2**64, step, epoch])
    perm = rng.permutation(n_pieces)
    n_mb = max(1, min(num_minibatches, n_pieces))
    return [np.sort(part) for part in np.array_split(perm, n_mb)]


class Trainer:
    """Tree-packed GRPO / PPO / SFT trainer.

    Args:
        model: a transformers causal LM (the policy), loaded with an attention implementation
            that takes a tree mask ("sdpa" on CPU, "flex_attention" on GPU, or "eager").
        config: hyperparameters.
        critic: for PPO, a separate critic (:class:`Critic`); without it PPO puts a
            :class:`ValueHead` on the policy's last hidden state.
        ref_model: frozen reference policy for the KL term (``loss.kl_coef > 0``).
        accelerator: an ``accelerate.Accelerator``; default: bf16 mixed precision on CUDA
            when ``config.bf16`` is "auto"/True, full precision on CPU.

    Raises:
        ConfigError: a KL coefficient without reference model, or bf16 forced on CPU.
    """

    def __init__(
        self,
        model: nn.Module,
        config: TrainerConfig | None = None,
        *,
        critic: Critic | None = None,
        ref_model: nn.Module | None = None,
        accelerator: Accelerator | None = None,
    ) -> None:
        self.config = config or TrainerConfig()
        cfg = self.config
        if cfg.loss.kl_coef > 0 and ref_model is None:
            raise ConfigError("loss.kl_coef > 0 needs a ref_model")
        cuda = torch.cuda.is_available()
        if cfg.bf16 is True and not cuda:
            raise ConfigError("bf16=True needs a GPU; use 'auto' or False on CPU")
        bf16 = cuda and cfg.bf16 in ("auto", True)
        self.accelerator = accelerator or Accelerator(
            cpu=not cuda, mixed_precision="bf16" if bf16 else "no"
        )
        seed_everything(cfg.seed)
        head = None
        if cfg.algorithm == "ppo" and critic is None:
            hidden = int(getattr(model.config, "hidden_size"))  # noqa: B009
            head = ValueHead(hidden).to(next(model.parameters()).dtype)
        o = cfg.optim
        value_params = (list(head.parameters()) if head else []) + (
            list(critic.parameters()) if critic is not None else []
        )
        groups: list[dict[str, Any]] = [{"params": list(model.parameters())}]
        if value_params:
            groups.append({"params": value_params, "lr": o.value_lr or o.lr})
        optimizer = torch.optim.AdamW(
            groups, lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay
        )
        scheduler = get_scheduler(
            o.schedule, optimizer, num_warmup_steps=o.warmup_steps, num_training_steps=o.total_steps
        )
        tree_model = TreeModel(model, head)
        if critic is not None:
            self.model, self.critic, self.optimizer, self.scheduler = self.accelerator.prepare(
                tree_model, critic, optimizer, scheduler
            )
        else:
            self.model, self.optimizer, self.scheduler = self.accelerator.prepare(
                tree_model, optimizer, scheduler
            )
            self.critic = None
        self.ref_model = ref_model
        if ref_model is not None:
            ref_model.requires_grad_(False)
        self.step = 0
        self.policy_version = 0
        #: the last :meth:`rl_step`'s batch, prepared per-membership quantities (advantage,
        #: importance weight, weight) and old pass, for logging (None before the first step)
        self.last_update: tuple[TreeBatch, PreparedRL, OldPass] | None = None
        self.data_position = 0

    # ------------------------------------------------------------------ helpers
    @property
    def unwrapped(self) -> TreeModel:
        """The :class:`TreeModel` (policy + optional value head) without wrappers."""
        m = self.accelerator.unwrap_model(self.model)
        assert isinstance(m, TreeModel)
        return m

    def _params(self) -> list[nn.Parameter]:
        ps = list(self.model.parameters())
        if self.critic is not None:
            ps += list(self.critic.parameters())
        return ps

    def _apply_gradients(self) -> float:
        """Clip the gradient norm, AdamW step, LR-schedule step; returns the norm."""
        o = self.config.optim
        norm = float("nan")
        if o.max_grad_norm is not None:
            norm = float(self.accelerator.clip_grad_norm_(self._params(), o.max_grad_norm))
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    # ------------------------------------------------------------------ steps
    def rl_step(
        self,
        trees: Sequence[PackedTree],
        rewards: Mapping[str, float],
        *,
        groups: Mapping[str, Hashable] | None = None,
    ) -> dict[str, float]:
        """One GRPO / PPO optimiser step on packed trees.

        Args:
            trees: packed trees (one per rollout, or merged per group).
            rewards: reward per rollout id.
            groups: GRPO group per rollout id (default: trajectory metadata
                ``config.grpo.group_key``, else the rollout id).

        Returns:
            metrics: losses, grad norm, learning rate, advantage/reward means, correction
            metrics (|Δlogprob|, ratio quantiles, fraction masked, staleness), and
            ``num_pieces``, ``num_minibatches`` (used), ``minibatches_capped`` (1.0 when
            fewer pieces than ``config.num_minibatches``).

        Warns:
            MinibatchCapWarning: fewer pieces than ``config.num_minibatches``.

        Raises:
            ConfigError, MissingGroupError: see :func:`clawrl.rl_core.prepare_rl`.
        """
        cfg = self.config
        batch = TreeBatch.from_trees(trees)
        pieces = split_by_token_budget(batch, cfg.token_budget)
        self.model.train()
        old = old_pass(
            self.model,
            batch,
            pieces,
            temperature=cfg.loss.temperature,
            chunk_size=cfg.chunk_size,
            critic=self.critic,
            ref_model=self.ref_model,
        )
        prepared = prepare_rl(
            batch,
            old,
            rewards,
            algorithm=cfg.algorithm,
            loss_cfg=cfg.loss,
            grpo_cfg=cfg.grpo,
            ppo_cfg=cfg.ppo,
            corr_cfg=cfg.corrections,
            groups=groups,
            current_version=self.policy_version,
        )
        self.last_update = (batch, prepared, old)
        n_mb = self._minibatch_count(len(pieces))
        lr = float(self.scheduler.get_last_lr()[0])
        stats, norms = self._update_epochs(batch, pieces, prepared, old, n_mb)
        self.step += 1
        self.policy_version += 1
        stats.update(
            grad_norm=norms[0],
            grad_norm_last=norms[-1],
            optimizer_steps=float(len(norms)),
            lr=lr,
            num_tokens=float(batch.num_tokens),
            num_memberships=float(batch.num_memberships),
            num_pieces=float(len(pieces)),
            num_minibatches=float(n_mb),
            minibatches_capped=float(n_mb < cfg.num_minibatches),
        )
        return {**stats, **prepared.metrics}

    def _minibatch_count(self, n_pieces: int) -> int:
        """``config.num_minibatches``, capped at the number of pieces (with a warning)."""
        want = self.config.num_minibatches
        n_mb = min(want, n_pieces)
        if n_mb < want:
            warnings.warn(
                f"step {self.step}: {n_pieces} token-budget pieces for num_minibatches="
                f"{want}; running {n_mb} minibatches (lower token_budget)",
                MinibatchCapWarning,
                stacklevel=3,
            )
        return n_mb

    def _update_epochs(
        self,
        batch: TreeBatch,
        pieces: Sequence[TreePiece],
        prepared: PreparedRL,
        old: OldPass,
        n_mb: int,
    ) -> tuple[dict[str, float], list[float]]:
        """``config.update_epochs`` passes over seeded-shuffled minibatches of ``pieces``,
        one optimiser step each (the policy frozen during PPO's value warm-up). Returns the
        first pass's summed loss statistics and every step's gradient norm."""
        cfg = self.config
        train_policy = not (cfg.algorithm == "ppo" and self.step < cfg.ppo.value_warmup_steps)
        stats: dict[str, float] = {}
        norms = []
        for epoch in range(cfg.update_epochs):
            parts = minibatch_indices(len(pieces), n_mb, seed=cfg.seed, step=self.step, epoch=epoch)
            for idx in parts:
                self.optimizer.zero_grad(set_to_none=True)
                mb_stats = loss_backward(
                    self.model,
                    batch,
                    [pieces[i] for i in idx],
                    prepared,
                    old,
                    loss_cfg=cfg.loss,
                    ppo_cfg=cfg.ppo,
                    critic=self.critic,
                    train_policy=train_policy,
                    chunk_size=cfg.chunk_size,
                    backward=lambda loss: self.accelerator.backward(loss * n_mb),
                )
                norms.append(self._apply_gradients())
                if epoch == 0:  # report the first pass over the batch
                    for k, v in mb_stats.items():
                        stats[k] = stats.get(k, 0.0) + v
        return stats, norms

    def sft_step(
        self, trees: Sequence[PackedTree], *, aggregation: Aggregation = "unique_token_mean"
    ) -> dict[str, float]:
        """One SFT optimiser step: NLL of the trainable (assistant) tokens.

        ``aggregation`` defaults to "unique_token_mean": each assistant token counts once
        even where several leaves share it (see :func:`clawrl.rl_core.aggregation_weights`).
        """
        cfg = self.config
        loss_cfg = dataclasses.replace(cfg.loss, aggregation=aggregation)
        batch = TreeBatch.from_trees(trees)
        pieces = split_by_token_budget(batch, cfg.token_budget)
        self.model.train()
        prepared = prepare_sft(batch, loss_cfg)
        self.optimizer.zero_grad(set_to_none=True)
        stats = loss_backward(
            self.model,
            batch,
            pieces,
            prepared,
            None,
            loss_cfg=loss_cfg,
            chunk_size=cfg.chunk_size,
            backward=self.accelerator.backward,
        )
        lr = float(self.scheduler.get_last_lr()[0])
        stats["grad_norm"] = self._apply_gradients()
        self.step += 1
        self.policy_version += 1
        stats["lr"] = lr
        stats["num_tokens"] = float(batch.num_tokens)
        return stats

    # ------------------------------------------------------------------ persistence
    def save_checkpoint(self, path: str | Path, *, data_position: int | None = None) -> Path:
        """Write model, optimizer, scheduler, RNG, step, policy version and data position
        (safetensors + JSON) to ``path``; only the main process writes."""
        if data_position is not None:
            self.data_position = data_position
        self.accelerator.wait_for_everyone()
        out = Path(path)
        if self.accelerator.is_main_process:
            save_checkpoint(
                out,
                model=self.unwrapped,
                optimizer=self.optimizer,
                scheduler=self.scheduler,
                critic=self.accelerator.unwrap_model(self.critic) if self.critic else None,
                state={
                    "step": self.step,
                    "policy_version": self.policy_version,
                    "data_position": self.data_position,
                    "config": dataclasses.asdict(self.config),
                },
            )
        self.accelerator.wait_for_everyone()
        return out

    def load_checkpoint(self, path: str | Path) -> dict[str, Any]:
        """Restore everything :meth:`save_checkpoint` wrote (RNG included); returns the state
        (``state["data_position"]`` tells the caller where to resume its data).

        Raises:
            CheckpointError: missing or mismatching files.
        """
        state = load_checkpoint(
            path,
            model=self.unwrapped,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            critic=self.accelerator.unwrap_model(self.critic) if self.critic else None,
        )
        self.step = int(state["step"])
        self.policy_version = int(state["policy_version"])
        self.data_position = int(state["data_position"])
        return state

    def export_hf(self, path: str | Path, tokenizer: Any = None) -> Path:
        """Save the policy as a Hugging Face checkpoint directory (``config.json`` +
        ``model.safetensors``, and the tokenizer if given) for the inference backend's
        weight reload. The value head is not part of it."""
        out = Path(path)
        self.accelerator.wait_for_everyone()
        policy = self.unwrapped.policy
        state = self.accelerator.get_state_dict(self.model)
        if self.accelerator.is_main_process:
            sub = {
                k.removeprefix("policy."): v for k, v in state.items() if k.startswith("policy.")
            }
            policy.save_pretrained(out, state_dict=sub)  # type: ignore[operator]
            if tokenizer is not None:
                tokenizer.save_pretrained(out)
        self.accelerator.wait_for_everyone()
        return out
