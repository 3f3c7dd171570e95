"""Trainer on accelerate: one process, or data-parallel ranks under ``accelerate launch``.

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

Under ``accelerate launch --num_processes N`` (DDP; CPU/gloo or GPU) every rank gets the
whole batch, trains the trees :func:`~clawrl.rl_core.partition_by_tokens` deals it, and the
step equals the one-process step (:mod:`clawrl.rl_core.distributed`); checkpoints are then
sharded (:mod:`clawrl.rl_core.sharded_checkpoint`). With ``config.fsdp`` the models are
sharded over the ranks (FSDP2) instead of replicated, and each rank's pieces are padded to
equal counts; the step is the same.
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
from accelerate.utils import DistributedType
from clawrl.prefixtree import PackedTree
from clawrl.rl_core.checkpoint import load_checkpoint, save_checkpoint
from clawrl.rl_core.config import Aggregation, TrainerConfig
from clawrl.rl_core.distributed import (
    allreduce_grads,
    allreduce_old_pass,
    allreduce_stats,
    clip_grad_norm_sharded,
    minibatch_pad_sizes,
    pad_pieces,
    partition_by_tokens,
    shard_tree_module,
    tree_token_ranges,
)
from clawrl.rl_core.errors import ConfigError, MinibatchCapWarning
from clawrl.rl_core.forward import TreeModel
from clawrl.rl_core.packing import TreeBatch, TreePiece, padding_piece, split_by_token_budget
from clawrl.rl_core.precision import resolve_precision
from clawrl.rl_core.sharded_checkpoint import (
    is_sharded_checkpoint,
    load_sharded_checkpoint,
    save_sharded_checkpoint,
)
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
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule
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


#: accelerate modes the tree step runs under with several processes: data parallel only
_DATA_PARALLEL = frozenset(
    {DistributedType.NO, DistributedType.MULTI_CPU, DistributedType.MULTI_GPU}
)


def _check_distributed(acc: Accelerator) -> None:
    """Raise ConfigError for a multi-process mode the tree step does not support."""
    if acc.num_processes > 1 and acc.distributed_type not in _DATA_PARALLEL:
        raise ConfigError(
            f"the tree-packed step runs under accelerate's data-parallel modes only (MULTI_CPU "
            f"/ MULTI_GPU), not {acc.distributed_type}: accelerate's FSDP, DeepSpeed and "
            "Megatron wrappers run a collective in every forward while ranks own different "
            "numbers of pieces. For sharded parameters set TrainerConfig.fsdp = True (the "
            "Trainer's own FSDP2, with padded piece counts) without accelerate's FSDP plugin"
        )


def _autocast_forward(module: nn.Module, device_type: str, dtype: torch.dtype | None) -> None:
    """Run ``module``'s forwards (and so their backwards) under ``torch.autocast`` to
    ``dtype``; nothing with None. Done here rather than by accelerate's ``mixed_precision``,
    which is process-wide state (an AcceleratorState singleton that cannot change once set)."""
    if dtype is None:
        return
    inner = module.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device_type, dtype=dtype):
            return inner(*args, **kwargs)

    module.forward = forward


class Trainer:
    """Tree-packed GRPO / PPO / SFT trainer.

    Args:
        model: a transformers causal LM (the policy), loaded with an attention implementation
            that takes a tree mask ("sdpa" on CPU, "flex_attention" on GPU, or "eager").
        config: hyperparameters.
        critic: for PPO, a separate critic (:class:`Critic`); without it PPO puts a
            :class:`ValueHead` on the policy's last hidden state.
        ref_model: frozen reference policy for the KL term (``loss.kl_coef > 0``).
        accelerator: an ``accelerate.Accelerator`` with ``mixed_precision="no"``; default:
            one on CUDA if available, else on CPU. ``config.precision`` = "bf16" runs the
            forwards of the policy, critic and reference under ``torch.autocast`` (bf16
            over float32 master weights).

    With ``config.fsdp`` and several processes, ``model``, ``critic`` and ``ref_model`` are
    sharded in place (FSDP2; their parameters become ``DTensor`` shards): read full weights
    with :meth:`export_hf` or ``torch.distributed.checkpoint.state_dict``.

    Raises:
        ConfigError: a KL coefficient without reference model, an accelerator with
            mixed precision (set ``config.precision``),
            several processes under a non-data-parallel accelerate mode (accelerate's FSDP
            plugin, DeepSpeed, Megatron: the tree step runs unequal numbers of forwards per
            rank; use ``config.fsdp``), or ``config.fsdp`` on a model another Trainer sharded.
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
        if cfg.loss.kl_coef > 0 and ref_model is None and cfg.lora is None:
            raise ConfigError("loss.kl_coef > 0 needs a ref_model (or config.lora)")
        cuda = torch.cuda.is_available()
        if accelerator is not None and accelerator.mixed_precision != "no":
            raise ConfigError(
                "pass an Accelerator with mixed_precision='no' (got "
                f"{accelerator.mixed_precision!r}) and set TrainerConfig.precision instead"
            )
        self.accelerator = accelerator or Accelerator(cpu=not cuda, mixed_precision="no")
        #: the precision the updates run in (``config.precision`` with "auto" resolved)
        self.precision = resolve_precision(cfg.precision, self.accelerator.device)
        #: the autocast dtype of every forward (None: fp32, no autocast)
        self.autocast_dtype = torch.bfloat16 if self.precision == "bf16" else None
        dev_type = self.accelerator.device.type
        _check_distributed(self.accelerator)
        #: FSDP2-sharded models (``config.fsdp`` with several processes)
        self.fsdp = cfg.fsdp and self.accelerator.num_processes > 1
        seed_everything(cfg.seed)
        head = None
        if cfg.algorithm == "ppo" and critic is None:
            hidden = int(getattr(model.config, "hidden_size"))  # noqa: B009
            head = ValueHead(hidden).to(next(model.parameters()).dtype)
        o = cfg.optim
        if cfg.freeze_embeddings:
            embeddings = model.get_input_embeddings()  # type: ignore[operator]
            embeddings.requires_grad_(False)
        if cfg.gradient_checkpointing:
            if not getattr(model, "supports_gradient_checkpointing", False):
                raise ConfigError("gradient_checkpointing: the model does not support it")
            model.activation_checkpointing_enable(  # type: ignore[operator]
                activation_checkpointing_kwargs={"use_reentrant": False}
            )
        #: the ``peft.PeftModel`` around the policy with ``config.lora`` (None without)
        self.peft_model: nn.Module | None = None
        self._ref_fwd: nn.Module | None = ref_model
        if cfg.lora is not None:  # adapters injected into ``model`` in place, base frozen
            from clawrl.rl_core.lora import AdapterDisabledReference, add_lora

            self.peft_model = add_lora(model, cfg.lora)
            if cfg.loss.kl_coef > 0 and ref_model is None:  # the base: adapters disabled
                self._ref_fwd = AdapterDisabledReference(self.peft_model)
        tree_model = TreeModel(model, head)
        if ref_model is not None:
            ref_model.requires_grad_(False)
        if not self.fsdp and self.autocast_dtype is not None:
            _autocast_forward(tree_model, dev_type, self.autocast_dtype)
            if critic is not None:
                _autocast_forward(critic, dev_type, self.autocast_dtype)
            if ref_model is not None:  # a wrapper: the caller's module is left as it is
                self._ref_fwd = TreeModel(ref_model)
            if self._ref_fwd is not None:
                _autocast_forward(self._ref_fwd, dev_type, self.autocast_dtype)
        if self.fsdp:  # before the optimizer: sharding replaces the parameters
            mesh = init_device_mesh(self.accelerator.device.type, (self.accelerator.num_processes,))
            shard_tree_module(tree_model, model, mesh, heads=[head] if head else [])
            _autocast_forward(tree_model, dev_type, self.autocast_dtype)
            if critic is not None:
                shard_tree_module(critic, critic.backbone, mesh, heads=[critic.head])
                _autocast_forward(critic, dev_type, self.autocast_dtype)
            if ref_model is not None:
                self._ref_fwd = TreeModel(ref_model)  # the root that all-gathers in forward
                shard_tree_module(self._ref_fwd, ref_model, mesh)
                _autocast_forward(self._ref_fwd, dev_type, self.autocast_dtype)
        value_params = (list(head.parameters()) if head else []) + (
            list(critic.parameters()) if critic is not None else []
        )
        groups: list[dict[str, Any]] = [
            {"params": [p for p in model.parameters() if p.requires_grad]}
        ]
        if value_params:
            groups.append({"params": value_params, "lr": o.value_lr or o.lr})
        optimizer = torch.optim.AdamW(
            groups, lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay
        )
        scheduler = get_scheduler(
            o.schedule, optimizer, num_warmup_steps=o.warmup_steps, num_training_steps=o.total_steps
        )
        if self.fsdp:  # sharded already; accelerate would wrap them in DDP
            self.model, self.critic = tree_model, critic
            self.optimizer, self.scheduler = optimizer, scheduler
        elif critic is not None:
            self.model, self.critic, self.optimizer, self.scheduler = self.accelerator.prepare(
                tree_model, critic, optimizer, scheduler
            )
        else:
            self.model, self.optimizer, self.scheduler = self.accelerator.prepare(
                tree_model, optimizer, scheduler
            )
            self.critic = None
        self.ref_model = ref_model
        self.step = 0
        self.policy_version = 0
        #: the last :meth:`rl_step`'s batch, prepared per-membership quantities (advantage,
        #: importance weight, weight) and old pass, for logging (None before the first step)
        self.last_update: tuple[TreeBatch, PreparedRL, OldPass] | None = None
        self.data_position = 0

    # ------------------------------------------------------------------ helpers
    @property
    def unwrapped(self) -> TreeModel:
        """The :class:`TreeModel` (policy + optional value head) without wrappers (under FSDP
        the sharded module itself)."""
        if self.fsdp:
            return self.model
        m = self.accelerator.unwrap_model(self.model)
        assert isinstance(m, TreeModel)
        return m

    @property
    def _fwd_model(self) -> nn.Module:
        """The module forwards run through: the wrapper in one process, the unwrapped module
        with several (no collective inside a forward; gradients are summed by hand), the
        sharded module under FSDP (its collectives are why pieces are padded)."""
        if self.fsdp or self.accelerator.num_processes == 1:
            return self.model
        return self.unwrapped

    @property
    def _fwd_critic(self) -> Critic | None:
        if self.critic is None or self.fsdp or self.accelerator.num_processes == 1:
            return self.critic
        c = self.accelerator.unwrap_model(self.critic)
        assert isinstance(c, Critic)
        return c

    def _local_pieces(self, trees: Sequence[PackedTree], batch: TreeBatch) -> list[TreePiece]:
        """This rank's token-budget pieces: all of them in one process, else the pieces of
        the trees :func:`partition_by_tokens` deals to this rank."""
        acc = self.accelerator
        if acc.num_processes == 1:
            return split_by_token_budget(batch, self.config.token_budget)
        sizes = [int(t.input_ids.shape[0]) for t in trees]
        mine = partition_by_tokens(sizes, acc.num_processes)[acc.process_index]
        ranges = tree_token_ranges(sizes, mine)
        if not ranges:
            return []
        pieces = split_by_token_budget(batch, self.config.token_budget, token_ranges=ranges)
        if self.fsdp:  # a piece without targets is skipped by loss_backward: a padding
            # piece in its place keeps every minibatch's forward count
            pieces = [p if p.targets.size else padding_piece() for p in pieces]
        return pieces

    def _reshard(self) -> None:
        """Under FSDP, free every gathered parameter and register the shards again. A root
        group stays gathered after its forward until its backward reshards it; a forward
        without backward (the no-grad pass, the reference policy, the policy during PPO's
        value warm-up) would leave it gathered, holding memory, with module parameters that
        are not the optimizer's, and across an optimizer step, stale."""
        if not self.fsdp:
            return
        for root in (self.model, self.critic, self._ref_fwd):
            if root is None:
                continue
            for m in root.modules():
                if isinstance(m, FSDPModule):
                    m.reshard()

    def _padded(self, pieces: Sequence[TreePiece], n: int) -> Sequence[TreePiece]:
        """Under FSDP, ``pieces`` padded to ``n`` (every rank runs as many forwards)."""
        return pad_pieces(pieces, n) if self.fsdp else pieces

    def _piece_counts(self, n_local: int) -> list[int]:
        """Every rank's number of pieces (a gather; ``[n_local]`` in one process)."""
        if self.accelerator.num_processes == 1:
            return [n_local]
        t = torch.tensor([n_local], dtype=torch.int64, device=self.accelerator.device)
        return [int(x) for x in self.accelerator.gather(t).tolist()]

    def _params(self) -> list[nn.Parameter]:
        ps = list(self.model.parameters())
        if self.critic is not None:
            ps += list(self.critic.parameters())
        return ps

    def _apply_gradients(self) -> float:
        """Sum gradients over ranks, clip the gradient norm, AdamW step, LR-schedule step;
        returns the norm."""
        o = self.config.optim
        if not self.fsdp:
            allreduce_grads(self._params(), self.accelerator)
        self._reshard()  # FSDP's reduce-scatter summed the gradients in backward
        norm = float("nan")
        if o.max_grad_norm is not None and self.fsdp:
            norm = clip_grad_norm_sharded(self._params(), o.max_grad_norm)
        elif o.max_grad_norm is not None:
            norm = float(self.accelerator.clip_grad_norm_(self._params(), o.max_grad_norm))
        self.optimizer.step()
        # the plain scheduler, once: accelerate's wrapper steps it once per process (it
        # assumes each process saw its own batch), which ran schedules N times too fast
        getattr(self.scheduler, "scheduler", self.scheduler).step()
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
            metrics: ``skipped_update`` (1.0 when every advantage is 0 and nothing else is
            trained: no optimizer step, see :meth:`_nothing_to_learn`), losses, grad norm,
            learning rate, advantage/reward means, correction
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
        pieces = self._local_pieces(trees, batch)
        counts = self._piece_counts(len(pieces))
        self.model.train()
        old = old_pass(
            self._fwd_model,
            batch,
            self._padded(pieces, max(counts)),
            temperature=cfg.loss.temperature,
            chunk_size=cfg.chunk_size,
            critic=self._fwd_critic,
            ref_model=self._ref_fwd,
        )
        self._reshard()
        old = allreduce_old_pass(old, self.accelerator)
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
        lr = float(self.scheduler.get_last_lr()[0])
        if self._nothing_to_learn(prepared):
            self.step += 1
            self.policy_version += 1
            # the loss of every term is exactly 0 here (no advantage, no KL, no entropy)
            zero = dict.fromkeys(("loss", "policy_loss", "value_loss", "kl", "entropy"), 0.0)
            return {
                **zero,
                "skipped_update": 1.0,
                "optimizer_steps": 0.0,
                "grad_norm": 0.0,
                "grad_norm_last": 0.0,
                "num_minibatches": 0.0,
                "minibatches_capped": 0.0,
                "lr": lr,
                "num_tokens": float(batch.num_tokens),
                "num_memberships": float(batch.num_memberships),
                "num_pieces": float(sum(counts)),
                **prepared.metrics,
            }
        n_mb = self._minibatch_count(min(counts))
        stats, norms = self._update_epochs(batch, pieces, prepared, old, n_mb, counts)
        stats = allreduce_stats(stats, self.accelerator)
        self.step += 1
        self.policy_version += 1
        stats.update(
            skipped_update=0.0,
            grad_norm=norms[0],
            grad_norm_last=norms[-1],
            optimizer_steps=float(len(norms)),
            lr=lr,
            num_tokens=float(batch.num_tokens),
            num_memberships=float(batch.num_memberships),
            num_pieces=float(sum(counts)),
            num_minibatches=float(n_mb),
            minibatches_capped=float(n_mb < cfg.num_minibatches),
        )
        return {**stats, **prepared.metrics}

    def _nothing_to_learn(self, prepared: PreparedRL) -> bool:
        """Whether an RL step has no gradient to follow: GRPO without a KL or entropy term
        and every advantage exactly 0 (e.g. every group's rewards equal). Such a step skips
        the optimizer (and the LR schedule): AdamW's momentum and weight decay would
        otherwise move the weights on a batch that says nothing. The same on every rank:
        the advantages are computed from the whole batch."""
        cfg = self.config
        return (
            cfg.algorithm == "grpo"
            and cfg.loss.kl_coef == 0
            and cfg.loss.entropy_coef == 0
            and prepared.advantage is not None
            and not np.any(prepared.advantage)
        )

    def _minibatch_count(self, n_pieces: int) -> int:
        """``config.num_minibatches``, capped at the number of pieces (the fewest of any
        rank's; at least 1) with a warning."""
        want = self.config.num_minibatches
        n_mb = max(1, min(want, n_pieces))
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
        counts: Sequence[int],
    ) -> tuple[dict[str, float], list[float]]:
        """``config.update_epochs`` passes over seeded-shuffled minibatches of ``pieces``,
        one optimiser step each (the policy frozen during PPO's value warm-up); under FSDP
        minibatch ``k`` is padded to the most pieces any rank has in its ``k``-th (``counts``:
        every rank's number of pieces). Returns the first pass's summed loss statistics and
        every step's gradient norm."""
        cfg = self.config
        train_policy = not (cfg.algorithm == "ppo" and self.step < cfg.ppo.value_warmup_steps)
        stats: dict[str, float] = {}
        norms = []
        pad_to = minibatch_pad_sizes(counts, n_mb)
        for epoch in range(cfg.update_epochs):
            parts = minibatch_indices(len(pieces), n_mb, seed=cfg.seed, step=self.step, epoch=epoch)
            for mb, idx in enumerate(parts):
                self.optimizer.zero_grad(set_to_none=True)
                mb_stats = loss_backward(
                    self._fwd_model,
                    batch,
                    self._padded([pieces[i] for i in idx], pad_to[mb]),
                    prepared,
                    old,
                    loss_cfg=cfg.loss,
                    ppo_cfg=cfg.ppo,
                    critic=self._fwd_critic,
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
        pieces = self._local_pieces(trees, batch)
        if self.fsdp:
            pieces = pad_pieces(pieces, max(self._piece_counts(len(pieces))))
        self.model.train()
        prepared = prepare_sft(batch, loss_cfg)
        self.optimizer.zero_grad(set_to_none=True)
        stats = loss_backward(
            self._fwd_model,
            batch,
            pieces,
            prepared,
            None,
            loss_cfg=loss_cfg,
            chunk_size=cfg.chunk_size,
            backward=self.accelerator.backward,
        )
        stats = allreduce_stats(stats, self.accelerator)
        lr = float(self.scheduler.get_last_lr()[0])
        stats["grad_norm"] = self._apply_gradients()
        self.step += 1
        self.policy_version += 1
        stats["lr"] = lr
        stats["num_tokens"] = float(batch.num_tokens)
        return stats

    # ------------------------------------------------------------------ persistence
    def _trained_modules(self) -> nn.Module:
        """The unwrapped policy (+ value head) and critic as one module (sharded state)."""
        mods: dict[str, nn.Module] = {"model": self.unwrapped}
        if self.critic is not None:
            mods["critic"] = (
                self.critic if self.fsdp else self.accelerator.unwrap_model(self.critic)
            )
        return nn.ModuleDict(mods)

    def _plain_optimizer(self) -> torch.optim.Optimizer:
        opt = getattr(self.optimizer, "optimizer", self.optimizer)
        assert isinstance(opt, torch.optim.Optimizer)
        return opt

    def save_checkpoint(self, path: str | Path, *, data_position: int | None = None) -> Path:
        """Write model, optimizer, scheduler, RNG, step, policy version and data position
        to ``path``. One process: safetensors + JSON (:mod:`clawrl.rl_core.checkpoint`).
        Several: collective, a sharded checkpoint every rank writes its share of
        (:mod:`clawrl.rl_core.sharded_checkpoint`)."""
        if data_position is not None:
            self.data_position = data_position
        self._reshard()  # the state dict is the optimizer's parameters, the shards
        acc = self.accelerator
        acc.wait_for_everyone()
        out = Path(path)
        state = {
            "step": self.step,
            "policy_version": self.policy_version,
            "data_position": self.data_position,
            "config": dataclasses.asdict(self.config),
        }
        if acc.num_processes > 1:
            save_sharded_checkpoint(
                out,
                modules=self._trained_modules(),
                optimizer=self._plain_optimizer(),
                scheduler=self.scheduler,
                state=state,
                rank=acc.process_index,
                world_size=acc.num_processes,
            )
        elif acc.is_main_process:
            save_checkpoint(
                out,
                model=self.unwrapped,
                optimizer=self.optimizer,
                scheduler=self.scheduler,
                critic=self.accelerator.unwrap_model(self.critic) if self.critic else None,
                state=state,
            )
        acc.wait_for_everyone()
        return out

    def load_checkpoint(self, path: str | Path) -> dict[str, Any]:
        """Restore everything :meth:`save_checkpoint` wrote (RNG included); returns the state
        (``state["data_position"]`` tells the caller where to resume its data).

        A sharded checkpoint (several processes wrote it) loads at any world size, one
        process included; RNG streams come back for the ranks that saved one.

        Raises:
            CheckpointError: missing or mismatching files.
        """
        self._reshard()
        if is_sharded_checkpoint(path):
            st = load_sharded_checkpoint(
                path,
                modules=self._trained_modules(),
                optimizer=self._plain_optimizer(),
                scheduler=self.scheduler,
                rank=self.accelerator.process_index,
            )
            self.step = int(st["step"])
            self.policy_version = int(st["policy_version"])
            self.data_position = int(st["data_position"])
            return st
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
        weight reload. The value head is not part of it. Collective with several processes:
        the full state dict is gathered (under FSDP from the shards, onto rank 0's CPU), only
        rank 0 writes."""
        out = Path(path)
        self.accelerator.wait_for_everyone()
        self._reshard()
        policy = self.unwrapped.policy
        if self.fsdp:
            opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
            state = get_model_state_dict(self.model, options=opts)
        else:
            state = self.accelerator.get_state_dict(self.model)
        if self.accelerator.is_main_process:
            sub: Mapping[str, Any] = {
                k.removeprefix("policy."): v for k, v in state.items() if k.startswith("policy.")
            }
            if self.peft_model is not None:  # the merged weights, in the plain layout
                from clawrl.rl_core.lora import merged_state_dict

                sub = merged_state_dict(policy)
            policy.save_pretrained(out, state_dict=sub)  # type: ignore[operator]
            if tokenizer is not None:
                tokenizer.save_pretrained(out)
        self.accelerator.wait_for_everyone()
        return out

    def close(self) -> None:
        """End training: with several processes, wait for every rank, then destroy the process
        group (``Accelerator.end_training``). Call it on every rank before the process exits:
        a rank that exits while another still holds the gloo group aborts with SIGABRT
        ("terminate called without an active exception"). A no-op in one process; safe to
        call twice."""
        if self.accelerator.num_processes > 1 and torch.distributed.is_initialized():
            self.accelerator.wait_for_everyone()
            self.accelerator.end_training()
