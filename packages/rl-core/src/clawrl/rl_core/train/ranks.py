"""The train loop under ``accelerate launch --num_processes N``: rank 0 drives, the others
follow.

Rank 0 alone runs :class:`~clawrl.rl_core.train.loop.TrainLoop` (tasks, rollouts through the
proxy, backend and sandboxes, evaluations, logs, the loop state, weight syncs). Every rank
holds the same policy and a :class:`~clawrl.rl_core.Trainer` for it (DDP) and takes part in
each of the Trainer's collective calls; ranks > 0 build no backend, proxy or sandbox and run
:func:`follow`, which executes rank 0's commands in the order rank 0 issues them.

Commands are tuples rank 0 pickles to the others (``torch.distributed.broadcast_object_list``
over a gloo group of their own, whose timeout is ``run.rank_timeout_s``: a follower waits
that long for the next command, so a step's rollouts and evaluations must fit in it):

``("trainer", key, model_dir, TrainerConfig, with_ref)``
    build Trainer ``key`` on this rank's policy (the first one loads the policy from
    ``model_dir``, as rank 0 did; DDP's wrap then broadcasts rank 0's weights); with a KL
    reference model (a copy of the policy as it is then);
``("call", key, method, args, kwargs, policy_version)``
    ``Trainer.<method>(*args, **kwargs)`` — ``rl_step``, ``sft_step``, ``save_checkpoint``,
    ``load_checkpoint``, ``export_hf`` — at rank 0's policy version;
``("sync_ref", key)``
    Trainer ``key``'s reference model takes rank 0's tensors (after rank 0 loaded or saved
    ``ref_policy.safetensors``);
``("stop",)``
    close the trainers (a barrier, then the process group is destroyed) and return.

Rank 0's side is :class:`DrivenTrainer` (a Trainer whose collective methods send their
command first) and :meth:`Ranks.stop`, which ``train`` calls in a ``finally``: an exception
in rank 0's loop (a rollout, a weight sync, a config check) stops the followers cleanly
before rank 0 exits with the error. An exception inside a Trainer call leaves the ranks at
unknown points of their collectives, so then no stop is sent: the failing rank exits
non-zero and the launcher (torchrun's agent behind ``accelerate launch``) terminates the
others. If rank 0 is killed, the agent on its node terminates the other local ranks at once;
a follower on another node fails at its next collective (gloo: the peer's connection
closes) or, at the latest, when its wait for a command exceeds ``run.rank_timeout_s``.

Shared files: the sharded checkpoints are written by every rank into one directory (a
shared filesystem across nodes); the policy is loaded from ``model_dir`` on every node.
"""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Hashable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from clawrl.prefixtree import PackedTree
from clawrl.rl_core.config import Aggregation, TrainerConfig
from clawrl.rl_core.errors import ConfigError
from clawrl.rl_core.trainer import Trainer, seed_everything
from torch import nn

__all__ = ["FSDP_LOOP_ERROR", "DrivenTrainer", "Ranks", "follow", "launch_ranks", "load_policy"]

#: why ``algo.fsdp`` is refused under a multi-process ``train`` (the Trainer itself has it)
FSDP_LOOP_ERROR = (
    "algo.fsdp is not supported by the train loop with several processes yet: rank 0's "
    "in-process weight sync, KL reference copy and cold-start-then-RL trainers read and "
    "re-wrap the whole policy, which FSDP shards in place (the Trainer supports fsdp: "
    "see the rl-core README, 'FSDP'); run it without fsdp (DDP)"
)


def load_policy(model_dir: str | Path) -> nn.Module:
    """The policy as the train loop trains it (float32, SDPA tree attention), on every rank."""
    from transformers import AutoModelForCausalLM

    model: nn.Module = AutoModelForCausalLM.from_pretrained(
        model_dir, attn_implementation="sdpa", dtype=torch.float32
    )
    return model


class Ranks:
    """The process group of an ``accelerate launch`` and the command channel over it.

    Args:
        timeout_s: how long a command broadcast may wait (a follower waiting for the next
            command).
    """

    def __init__(self, timeout_s: float) -> None:
        from accelerate import PartialState

        state = PartialState(cpu=not torch.cuda.is_available())
        self.rank = int(state.process_index)
        self.world_size = int(state.num_processes)
        #: a gloo group for the commands (CPU pickles whatever the training backend is),
        #: with its own timeout: followers wait in it while rank 0 runs rollouts
        group = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))
        assert isinstance(group, dist.ProcessGroup)  # every rank is a member
        self._group = group
        self._keys = 0
        #: rank 0: the trainers built (closed by :meth:`stop`)
        self.trainers: list[Trainer] = []
        #: rank 0: a Trainer call raised, the ranks may be mid-collective (no stop then)
        self.broken = False
        self.stopped = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def send(self, command: tuple[Any, ...]) -> None:
        """Rank 0: broadcast ``command`` to the others."""
        assert self.is_main
        dist.broadcast_object_list([command], src=0, group=self._group)

    def recv(self) -> tuple[Any, ...]:
        """Ranks > 0: the next command from rank 0 (waits up to the group's timeout)."""
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0, group=self._group)
        command = box[0]
        assert isinstance(command, tuple) and command, command
        return command

    def new_key(self) -> int:
        self._keys += 1
        return self._keys

    def broadcast_module(self, module: nn.Module) -> None:
        """Every rank: ``module``'s parameters and buffers become rank 0's (over the gloo
        group, through CPU copies)."""
        for t in [*module.parameters(), *module.buffers()]:
            buf = t.detach().to("cpu", copy=True).contiguous()
            dist.broadcast(buf, src=0, group=self._group)
            if not self.is_main:
                with torch.no_grad():
                    t.copy_(buf.to(t.device))

    def close(self, trainers: Sequence[Trainer]) -> None:
        """Every rank, in step: close the trainers (a barrier, then the process group is
        destroyed); without one, the same directly."""
        for t in trainers:
            t.close()
        if dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()

    def stop(self) -> None:
        """Rank 0, at the end of the run (also after an error): send ``("stop",)`` and close,
        unless a Trainer call raised (the ranks may be inside a collective: the launcher
        ends the others when this rank exits non-zero). Safe to call twice."""
        if self.stopped or self.broken:
            return
        self.stopped = True
        self.send(("stop",))
        self.close(self.trainers)


def launch_ranks(timeout_s: float) -> Ranks | None:
    """The :class:`Ranks` of an ``accelerate launch`` with several processes (the process
    group is initialised here), or None in one process (``WORLD_SIZE`` unset or 1)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    return Ranks(timeout_s)


class DrivenTrainer(Trainer):
    """Rank 0's Trainer: building it and each collective call first send the command the
    followers execute (:func:`follow`), then run here."""

    def __init__(
        self,
        ranks: Ranks,
        model_dir: str | Path,
        model: nn.Module,
        config: TrainerConfig,
        *,
        ref_model: nn.Module | None = None,
    ) -> None:
        if config.fsdp:
            raise ConfigError(FSDP_LOOP_ERROR)
        self._ranks = ranks
        self._key = ranks.new_key()
        ranks.send(("trainer", self._key, str(model_dir), config, ref_model is not None))
        try:
            super().__init__(model, config, ref_model=ref_model)
        except BaseException:
            ranks.broken = True
            raise
        ranks.trainers.append(self)

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        self._ranks.send(("call", self._key, method, args, kwargs, self.policy_version))
        try:
            return getattr(super(), method)(*args, **kwargs)
        except BaseException:
            self._ranks.broken = True
            raise

    def rl_step(
        self,
        trees: Sequence[PackedTree],
        rewards: Mapping[str, float],
        *,
        groups: Mapping[str, Hashable] | None = None,
    ) -> dict[str, float]:
        groups = dict(groups) if groups is not None else None
        out: dict[str, float] = self._call("rl_step", list(trees), dict(rewards), groups=groups)
        return out

    def sft_step(
        self, trees: Sequence[PackedTree], *, aggregation: Aggregation = "unique_token_mean"
    ) -> dict[str, float]:
        out: dict[str, float] = self._call("sft_step", list(trees), aggregation=aggregation)
        return out

    def save_checkpoint(self, path: str | Path, *, data_position: int | None = None) -> Path:
        out: Path = self._call("save_checkpoint", Path(path), data_position=data_position)
        return out

    def load_checkpoint(self, path: str | Path) -> dict[str, Any]:
        out: dict[str, Any] = self._call("load_checkpoint", Path(path))
        return out

    def export_hf(self, path: str | Path, tokenizer: Any = None) -> Path:
        out: Path = self._call("export_hf", Path(path), tokenizer)
        return out

    def sync_reference(self) -> None:
        """The followers' KL reference model takes rank 0's weights."""
        assert self.ref_model is not None
        self._ranks.send(("sync_ref", self._key))
        self._ranks.broadcast_module(self.ref_model)


def follow(ranks: Ranks, seed: int) -> None:
    """Ranks > 0: execute rank 0's commands until ``("stop",)`` (see the module docstring),
    then close. An exception propagates (no close: the others may be mid-collective; the
    launcher ends them when this process exits non-zero)."""
    assert not ranks.is_main
    policy: nn.Module | None = None
    trainers: dict[int, Trainer] = {}
    while True:
        command = ranks.recv()
        kind = command[0]
        if kind == "stop":
            break
        if kind == "trainer":
            _, key, model_dir, config, with_ref = command
            if policy is None:
                seed_everything(seed)
                policy = load_policy(model_dir)
            ref = copy.deepcopy(policy).eval() if with_ref else None
            trainers[key] = Trainer(policy, config, ref_model=ref)
        elif kind == "call":
            _, key, method, args, kwargs, version = command
            trainer = trainers[key]
            trainer.policy_version = version
            getattr(trainer, method)(*args, **kwargs)
        elif kind == "sync_ref":
            ref_model = trainers[command[1]].ref_model
            assert ref_model is not None
            ranks.broadcast_module(ref_model)
        else:
            raise RuntimeError(f"unknown command from rank 0: {kind!r}")
    print(f"train rank {ranks.rank}: stopped by rank 0", file=sys.stderr, flush=True)
    ranks.close(list(trainers.values()))
