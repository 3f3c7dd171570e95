"""The black-box RL loop: rollouts through bench's runner → prefix trees → tree-packed
GRPO / PPO update → weight sync → policy version + 1 → repeat.

One RL step (synchronous mode):

1. **sample** ``tasks.tasks_per_step`` training tasks (deterministic in ``run.seed`` and the
   step, so a resumed run draws the same tasks);
2. **rollout**: ``rollout.samples`` rollouts per (task, harness) group through
   :class:`clawrl.bench.RolloutRunner` (a podman sandbox and a proxy session each; the
   proxy imposes training sampling: temperature T, top_p = 1, no top_k);
   each rollout's call records are final when the runner reads them (the proxy's
   ``close_session`` returns once every call of the session is committed);
3. **trees**: one prefix tree per rollout with the paper's filters, one group tree per
   (task, harness) (:func:`~clawrl.rl_core.train.trees.build_group_trees`);
4. **update**: ``algo.updates_per_step`` optimiser steps of rl-core's
   :class:`~clawrl.rl_core.Trainer` (GRPO advantages per group, or PPO with GAE);
5. **sync**: the proxy is paused, the new weights go to the backend (in-process
   ``load_state_dict`` for the embedded backend; an HF export loaded through the proxy's
   load-weights admin call — SGLang's ``/update_weights_from_disk`` — otherwise), the
   policy version becomes version + 1, the proxy resumes;
6. **log** one JSONL row, checkpoint every ``run.checkpoint_every`` steps, evaluate on
   held-out tasks every ``eval.every`` steps.

Asynchronous mode (``[async] enabled``): the rollouts of the next ``max_staleness``
batches are collected while the trainer updates (the update runs in a worker thread, the
event loop keeps serving the harnesses); before an update, rollouts whose oldest call is
more than ``max_staleness`` policy versions behind are dropped; the recorded rollout
logprobs drive rl-core's corrections for the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import random
import shutil
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from clawrl.bench import (
    HarnessAdapter,
    HostVerificationError,
    LocalExecutor,
    ModelEndpoint,
    RolloutEvent,
    RolloutOptions,
    RolloutResult,
    RolloutRunner,
    RolloutStatus,
    SandboxExecutor,
    Task,
    check_host_verification,
    generate_learnable_tasks,
    get_harness,
    load_builtin_suite,
    load_suite,
    oracle_completions,
    plan_rollouts,
)
from clawrl.prefixtree import Call, PrefixTree, merge_trees
from clawrl.proxy import (
    BackendConfig,
    InferenceBackend,
    format_assistant_text,
    make_backend,
    serve,
)
from clawrl.rl_core.config import LossConfig, OptimConfig, TrainerConfig
from clawrl.rl_core.errors import ConfigError, RLCoreError
from clawrl.rl_core.sft import epoch_batches
from clawrl.rl_core.train.config import TrainConfig
from clawrl.rl_core.train.metrics_log import MetricsLog, plot_curves, read_jsonl
from clawrl.rl_core.train.trees import RolloutData, build_group_trees
from clawrl.rl_core.trainer import Trainer, seed_everything
from clawrl.sandbox import owned_tempdir

__all__ = ["TrainError", "TrainLoop", "run_training", "scripted_turns"]


class TrainError(RLCoreError):
    """The loop cannot go on (no usable rollouts, a weight sync failed, a bad checkpoint)."""


Say = Callable[[str], None]


def scripted_turns(task: Task) -> list[str]:
    """The scripted policy's assistant turns for ``task`` (cold-start data).

    For a learnable-family task (``metadata`` has ``file`` and ``word``): one
    ``write_file`` call creating the file — the skill the RL policy is trained on. For any
    other task: bench's :func:`~clawrl.bench.oracle_completions` (the oracle as tool calls).
    """
    meta = task.metadata
    if isinstance(meta.get("file"), str) and isinstance(meta.get("word"), str):
        call = ("write_file", {"path": meta["file"], "content": meta["word"]})
        return [format_assistant_text(tool_calls=[call])]
    return oracle_completions(task)


@dataclass
class LoopState:
    """What a checkpoint stores besides the trainer: where the loop is."""

    next_step: int = 0
    policy_version: int = 0
    cold_start_done: bool = False
    evals: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(self.__dict__, indent=1)


def _mean_std(xs: Sequence[float]) -> tuple[float, float]:
    if not xs:
        return float("nan"), float("nan")
    return float(statistics.fmean(xs)), float(statistics.pstdev(xs)) if len(xs) > 1 else 0.0


class TrainLoop:
    """One ``train`` run (see the module docstring).

    Args:
        config: the resolved :class:`TrainConfig`.
        resume: continue from ``<run.out>/checkpoints/latest``.
        say: where progress lines go (default: print).
    """

    def __init__(self, config: TrainConfig, *, resume: bool = False, say: Say | None = None):
        self.cfg = config
        self.resume = resume
        self.say: Say = say or print
        self.out = Path(config.run.out)
        self.ckpt_dir = self.out / "checkpoints"
        self.state = LoopState()
        self.run_id = f"train-{uuid.uuid4().hex[:8]}"
        self._verify_executor: SandboxExecutor | None = None
        self.log: MetricsLog | None = None
        self.progress: Callable[[RolloutEvent], None] | None = None

    # ------------------------------------------------------------------ setup
    def _model_dir(self) -> Path:
        m = self.cfg.model
        if m.path:
            return Path(m.path)
        from clawrl.proxy import build_default_model

        return build_default_model(
            m.tokenizer,
            seed=m.init_seed,
            num_hidden_layers=m.num_hidden_layers,
            hidden_size=m.hidden_size,
            intermediate_size=m.intermediate_size,
            num_attention_heads=m.num_attention_heads,
            num_key_value_heads=m.num_key_value_heads,
        )

    def _tasks(self) -> tuple[list[Task], list[Task]]:
        t = self.cfg.tasks
        if t.family == "learnable":
            root = self.out / "tasks"
            vocab = {"n_names": t.learnable_names or None, "n_words": t.learnable_words or None}
            try:
                train = generate_learnable_tasks(
                    root / "train", "train", t.train_n, self.cfg.run.seed, **vocab
                )
                held = generate_learnable_tasks(
                    root / "heldout", "heldout", t.heldout_n, self.cfg.run.seed, **vocab
                )
            except ValueError as exc:
                raise ConfigError(f"[tasks]: {exc}") from exc
            return train, held
        tasks = load_builtin_suite() if t.family == "builtin" else load_suite(t.path)
        tasks = list(tasks)
        if not tasks:
            raise ConfigError("no tasks found")
        return tasks, tasks

    # ------------------------------------------------------------------ weights
    async def sync_weights(self, endpoint: ModelEndpoint, backend: Any, version: int) -> float:
        """Pause the proxy, load the policy's weights into the backend at ``version``,
        resume. Returns seconds taken.

        Raises:
            TrainError: the backend reports another version afterwards.
        """
        t0 = time.time()
        await endpoint.admin.pause()
        try:
            if self.cfg.backend.kind == "embedded":
                state = {k: v.detach() for k, v in self.policy.state_dict().items()}
                await backend.load_state_dict(state, version)
                got = int(backend.policy_version)
            else:
                path = self.out / "weights" / f"v{version:06d}"
                await asyncio.to_thread(self.rl_trainer.export_hf, path)
                got = await endpoint.admin.load_weights(str(path.resolve()), version)
                old = self.out / "weights" / f"v{version - 2:06d}"
                shutil.rmtree(old, ignore_errors=True)
        finally:
            await endpoint.admin.resume()
        if got != version:
            raise TrainError(f"weight sync: backend reports version {got}, expected {version}")
        self.state.policy_version = version
        return time.time() - t0

    # ------------------------------------------------------------------ rollouts
    def _runner(
        self,
        endpoint: ModelEndpoint,
        *,
        max_turns: int | None = None,
        session_hook: Any = None,
        run_id: str | None = None,
        scripted: bool = False,
    ) -> RolloutRunner:
        r = self.cfg.rollout
        opts = RolloutOptions(
            max_turns=max_turns or r.max_turns,
            max_tokens=None if scripted else r.max_tokens,
            agent_timeout_s=r.agent_timeout_s,
            retries=r.retries,
        )
        return RolloutRunner(
            endpoint,
            opts,
            concurrency=r.concurrency,
            run_id=run_id or self.run_id,
            progress=self.progress,
            session_hook=session_hook,
            verify_executor=(LocalExecutor() if r.verifier == "host" else self._sandbox_verifier()),
        )

    def _sandbox_verifier(self) -> SandboxExecutor:
        """One verifier executor for the whole run: its warm single-use sandboxes outlive
        each step's runner (a runner's own executor is closed after each batch)."""
        if self._verify_executor is None:
            self._verify_executor = SandboxExecutor(
                run_id=self.run_id, warm=self.cfg.rollout.concurrency
            )
        return self._verify_executor

    async def evaluate(
        self,
        endpoint: ModelEndpoint,
        tasks: Sequence[Task],
        harnesses: Sequence[HarnessAdapter],
        tag: str,
    ) -> dict[str, Any]:
        """Mean reward, pass rate and verifier sub-scores (``eval_subscore/NAME``, a missing
        sub-score counting 0) on ``tasks`` (held-out) at the current weights."""
        t0 = time.time()
        runner = self._runner(endpoint)
        specs = plan_rollouts(
            list(tasks),
            list(harnesses),
            self.cfg.eval.samples,
            group_prefix=f"eval-{tag}/",
            seed=self.cfg.run.seed,
        )
        results = await runner.run(specs)
        ok = [x for x in results if x.status is not RolloutStatus.INFRA_ERROR]
        rewards = [x.reward for x in ok]
        row: dict[str, Any] = {
            "kind": "eval",
            "tag": tag,
            "policy_version": self.state.policy_version,
            "eval_reward": _mean_std(rewards)[0],
            "eval_pass_rate": _mean_std([float(x.reward >= 1.0) for x in ok])[0],
            "eval_n": len(ok),
            "eval_infra_errors": len(results) - len(ok),
            "time/eval": time.time() - t0,
        }
        for h in harnesses:
            hr = [x.reward for x in ok if x.harness == h.name]
            row[f"eval_reward/{h.name}"] = _mean_std(hr)[0]
        for name in sorted({k for x in ok for k in x.subscores}):  # the verifier's sub-scores
            row[f"eval_subscore/{name}"] = _mean_std([x.subscores.get(name, 0.0) for x in ok])[0]
        return row

    # ------------------------------------------------------------------ cold start
    async def cold_start(
        self,
        endpoint: ModelEndpoint,
        backend: Any,
        train: Sequence[Task],
        held: Sequence[Task],
        harnesses: Sequence[HarnessAdapter],
    ) -> None:
        """SFT on scripted-policy trajectories captured through the harness path."""
        cs = self.cfg.cold_start
        model_dir = self.model_dir
        scripted = make_backend(BackendConfig(kind="scripted", model_dir=model_dir))
        tasks = list(train)[: cs.tasks]
        t0 = time.time()
        self.say(
            f"cold start: capturing {len(tasks)} scripted-policy trajectories "
            "(ScriptedBackend, a test backend) through the harness path"
        )
        async with self._serve(scripted) as sep:

            async def hook(session: Any, spec: Any) -> None:
                await sep.admin.script(session.session_id, scripted_turns(spec.task))

            n_turns = max(len(scripted_turns(t)) for t in tasks)
            runner = self._runner(
                sep,
                max_turns=n_turns,
                session_hook=hook,
                run_id=f"{self.run_id}-coldstart",
                scripted=True,
            )
            specs = plan_rollouts(
                tasks, [harnesses[0]], 1, group_prefix="coldstart/", seed=self.cfg.run.seed
            )
            results = await runner.run(specs)
        good = [x for x in results if x.reward >= 1.0 and x.records]
        if not good:
            for x in results[:2]:
                self.say(
                    f"cold start: {x.status.value} {x.reason} reward {x.reward} "
                    f"stdout {x.stdout[-300:]!r} stderr {x.stderr[-300:]!r}"
                )
        self.say(
            f"cold start: {len(good)}/{len(results)} scripted trajectories solved "
            f"their task ({time.time() - t0:.0f} s)"
        )
        if not good:
            raise TrainError(
                "cold start: no scripted trajectory solved its task "
                f"(statuses: {[x.status.value for x in results][:5]})"
            )
        trees = [
            PrefixTree.from_calls(
                Call.from_records(x.records),
                rollout_id=x.rollout_id,
            )
            for x in good
        ]
        # SFT fits the model's own distribution (T = 1); rollouts then sample it at
        # rollout.temperature.
        sft = Trainer(
            self.policy,
            TrainerConfig(
                loss=LossConfig(aggregation="token_mean"),
                optim=OptimConfig(lr=cs.lr, max_grad_norm=1.0, total_steps=max(1, cs.steps)),
                token_budget=self.cfg.algo.trainer.token_budget,
                chunk_size=self.cfg.algo.trainer.chunk_size,
                seed=self.cfg.run.seed,
            ),
        )
        batches = epoch_batches(
            len(trees), cs.batch_size, random.Random(f"coldstart:{self.cfg.run.seed}")
        )
        version = self.state.policy_version
        for step in range(1, cs.steps + 1):
            idx = next(batches)
            batch = merge_trees(*[trees[i] for i in idx]).pack()
            t1 = time.time()
            m = await asyncio.to_thread(sft.sft_step, [batch])
            assert self.log is not None
            self.log.write(
                {
                    "kind": "sft",
                    "sft_step": step,
                    "loss": m["loss"],
                    "grad_norm": m["grad_norm"],
                    "num_tokens": m["num_tokens"],
                    "time/update": time.time() - t1,
                }
            )
            if step % 10 == 0 or step == cs.steps:
                self.say(f"cold start: SFT step {step}/{cs.steps} loss {m['loss']:.3f}")
            if cs.evaluates_at(step):
                if not self.cfg.eval.enabled:
                    version += 1
                    await self.sync_weights(endpoint, backend, version)
                    continue
                version += 1
                await self.sync_weights(endpoint, backend, version)
                row = await self.evaluate(endpoint, held, harnesses, f"coldstart-{step}")
                row.update(step=0, sft_step=step)
                self.log.write(row)
                self.state.evals.append(row)
                self.say(
                    f"cold start: held-out eval reward {row['eval_reward']:.3f} "
                    f"after {step} SFT steps"
                )
                if row["eval_reward"] >= cs.stop_at_reward:
                    self.say(f"cold start: stopped (eval reward >= {cs.stop_at_reward})")
                    break
        del sft
        self.state.cold_start_done = True

    # ------------------------------------------------------------------ checkpoints
    def _latest(self) -> Path | None:
        ptr = self.ckpt_dir / "latest"
        if not ptr.exists():
            return None
        path = self.ckpt_dir / ptr.read_text().strip()
        return path if (path / "loop_state.json").exists() else None

    def save_checkpoint(self) -> Path:
        """Write ``checkpoints/step-NNNNNN`` atomically (trainer state + loop state), point
        ``checkpoints/latest`` at it, keep the newest ``run.keep_checkpoints``."""
        name = f"step-{self.state.next_step:06d}"
        tmp = self.ckpt_dir / f".{name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        self.rl_trainer.save_checkpoint(tmp, data_position=self.state.next_step)
        (tmp / "loop_state.json").write_text(self.state.to_json())
        final = self.ckpt_dir / name
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        ptr_tmp = self.ckpt_dir / ".latest.tmp"
        ptr_tmp.write_text(name)
        os.replace(ptr_tmp, self.ckpt_dir / "latest")
        keep = self.cfg.run.keep_checkpoints
        old = sorted(p for p in self.ckpt_dir.glob("step-*") if p.is_dir())[:-keep]
        for p in old:
            shutil.rmtree(p, ignore_errors=True)
        return final

    def _reference_policy(self, *, resumed: bool) -> None:
        """The KL term's reference is the policy as RL started (after the cold start): saved
        once to ``checkpoints/ref_policy.safetensors``, loaded from there on ``--resume``
        (the freshly built model would be the pre-cold-start weights)."""
        from safetensors.torch import load_model, save_model

        assert self.ref_model is not None
        path = self.ckpt_dir / "ref_policy.safetensors"
        if path.exists():
            load_model(self.ref_model, str(path))
            return
        if resumed and self.state.next_step > 0:
            self.say(
                f"warning: no {path.name} (a run from before it was saved): the KL "
                "reference is the resumed checkpoint's policy, not RL's start"
            )
        self.ref_model.load_state_dict(self.policy.state_dict())
        tmp = path.with_name(f".{path.name}.tmp")
        save_model(self.ref_model, str(tmp))
        os.replace(tmp, path)

    # ------------------------------------------------------------------ main
    async def run(self) -> dict[str, Any]:
        """Run (or resume) the whole loop; returns a summary (also ``summary.json``).

        Raises:
            ConfigError: among others, ``rollout.verifier = "host"`` for tasks whose verifier
                executes workspace code (before any rollout).
        """
        from clawrl.sandbox import gc as sandbox_gc
        from clawrl.sandbox import gc_tempdirs
        from transformers import AutoModelForCausalLM

        cfg = self.cfg
        self.out.mkdir(parents=True, exist_ok=True)
        self.ckpt_dir.mkdir(exist_ok=True)
        cfg.save(self.out / "config.json")
        with (self.out / "runs.jsonl").open("a") as f:  # one line per process (resumes)
            f.write(
                json.dumps(
                    {
                        "run_id": self.run_id,
                        "pid": os.getpid(),
                        "started": time.time(),
                        "resume": self.resume,
                    }
                )
                + "\n"
            )
        removed = await sandbox_gc()
        if removed:
            self.say(f"removed {len(removed)} sandbox(es) left by dead runs")
        stale = await asyncio.to_thread(gc_tempdirs)
        if stale:
            self.say(
                f"removed {len(stale)} temporary director"
                f"{'y' if len(stale) == 1 else 'ies'} left by dead runs"
            )
        seed_everything(cfg.run.seed)
        self.model_dir = await asyncio.to_thread(self._model_dir)
        train, held = await asyncio.to_thread(self._tasks)
        if cfg.rollout.verifier == "host":  # refused before any rollout for such tasks
            try:
                check_host_verification([*train, *held], LocalExecutor())
            except HostVerificationError as exc:
                raise ConfigError(f"rollout.verifier = 'host': {exc}") from exc
        harnesses = [get_harness(h) for h in cfg.rollout.harnesses]
        self.log = MetricsLog(self.out, tensorboard=cfg.logging.tensorboard)
        self.policy = AutoModelForCausalLM.from_pretrained(
            self.model_dir, attn_implementation="sdpa", dtype=torch.float32
        )
        latest = self._latest() if self.resume else None
        if self.resume and latest is None:
            self.say("no checkpoint to resume from: starting afresh")
        if latest is not None:
            self.state = LoopState(**json.loads((latest / "loop_state.json").read_text()))
            moved = self.log.supersede_after(self.state.next_step)
            if moved:
                self.say(
                    f"{moved} metrics row(s) of steps after {latest.name} moved to "
                    "metrics.superseded.jsonl (those steps run again)"
                )

        backend = self._backend()
        async with self._serve(backend) as endpoint:
            r = cfg.rollout
            await endpoint.admin.set_sampling(
                temperature=r.temperature, top_p=1.0, top_k=-1, max_tokens=r.max_tokens
            )
            if cfg.cold_start.enabled and not self.state.cold_start_done:
                await self.cold_start(endpoint, backend, train, held, harnesses)
            kl = cfg.algo.trainer.loss.kl_coef
            self.ref_model = copy.deepcopy(self.policy).eval() if kl > 0 else None
            self.rl_trainer = Trainer(self.policy, cfg.trainer_config(), ref_model=self.ref_model)
            if latest is not None:
                await asyncio.to_thread(self.rl_trainer.load_checkpoint, latest)
                self.say(
                    f"resumed from {latest.name}: step {self.state.next_step}, "
                    f"policy version {self.state.policy_version}"
                )
                await self.sync_weights(endpoint, backend, self.state.policy_version)
            elif cfg.cold_start.enabled:
                self.save_checkpoint()
            if self.ref_model is not None:
                await asyncio.to_thread(self._reference_policy, resumed=latest is not None)
            if (
                self.state.next_step == 0
                and cfg.eval.enabled
                and not (cfg.cold_start.enabled and self.state.evals)
            ):
                row = await self.evaluate(endpoint, held, harnesses, "step-0")
                row["step"] = 0
                self.log.write(row)
                self.state.evals.append(row)
                self.say(f"eval before RL: held-out reward {row['eval_reward']:.3f}")
            await self._rl_steps(endpoint, backend, train, held, harnesses)
        if self._verify_executor is not None:
            await asyncio.to_thread(self._verify_executor.close)
        self.log.close()
        return self._finish()

    def _serve(self, backend: InferenceBackend) -> AbstractAsyncContextManager[ModelEndpoint]:
        """The proxy in the loop's own event loop (the embedded backend's in-process weight
        sync and the harnesses' calls share one loop); its sockets in an owned temporary
        directory, its records in ``<out>/capture``."""
        return serve(
            backend,
            self.model_dir,
            capture_dir=self.out / "capture",
            in_thread=False,
            tempdir=owned_tempdir,
            tempdir_prefix="clawrl-train-px-",
        )

    def _backend(self) -> InferenceBackend:
        b = self.cfg.backend
        if b.kind == "embedded":
            config = BackendConfig(
                kind="embedded",
                model_dir=self.model_dir,
                device=b.device,
                max_batch_size=b.max_batch_size,
                seed=self.cfg.run.seed * 1000 + self.state.next_step,
                policy_version=self.state.policy_version,
            )
        else:
            config = BackendConfig(kind=b.kind, sglang_url=b.sglang_url)
        return make_backend(config)

    def _sample_tasks(self, train: Sequence[Task], step: int) -> list[Task]:
        rng = random.Random(f"{self.cfg.run.seed}:{step}")
        k = min(self.cfg.tasks.tasks_per_step, len(train))
        return rng.sample(list(train), k)

    async def _collect(
        self,
        endpoint: ModelEndpoint,
        train: Sequence[Task],
        harnesses: Sequence[HarnessAdapter],
        step: int,
    ) -> tuple[list[RolloutResult], dict[str, list[dict[str, Any]]], float]:
        t0 = time.time()
        specs = plan_rollouts(
            self._sample_tasks(train, step),
            list(harnesses),
            self.cfg.rollout.samples,
            group_prefix=f"s{step}/",
            seed=self.cfg.run.seed,
        )
        results = await self._runner(endpoint).run(specs)
        # final: the runner read them after close_session, which waits for every commit
        records = {x.rollout_id: list(x.records) for x in results}
        return results, records, time.time() - t0

    async def _rl_steps(
        self,
        endpoint: ModelEndpoint,
        backend: Any,
        train: Sequence[Task],
        held: Sequence[Task],
        harnesses: Sequence[HarnessAdapter],
    ) -> None:
        cfg = self.cfg
        assert self.log is not None
        ahead = cfg.async_.max_staleness if cfg.async_.enabled else 0
        pending: dict[int, asyncio.Task[Any]] = {}
        try:
            for step in range(self.state.next_step, cfg.run.steps):
                for s in range(step, min(cfg.run.steps, step + ahead + 1)):
                    if s not in pending:
                        pending[s] = asyncio.ensure_future(
                            self._collect(endpoint, train, harnesses, s)
                        )
                t_step = time.time()
                results, records, t_roll = await pending.pop(step)
                t_wait = time.time() - t_step  # async mode: what the trainer waited for
                row = await self._update(step, results, records)
                row["time/rollout"] = t_wait if cfg.async_.enabled else t_roll
                row["time/sync"] = await self.sync_weights(
                    endpoint, backend, self.state.policy_version + 1
                )
                row["policy_version"] = self.state.policy_version
                self.state.next_step = step + 1
                if cfg.eval.enabled and (
                    (cfg.eval.every and (step + 1) % cfg.eval.every == 0)
                    or step + 1 == cfg.run.steps
                ):
                    ev = await self.evaluate(endpoint, held, harnesses, f"step-{step + 1}")
                    ev["step"] = step + 1
                    self.log.write(ev)
                    self.state.evals.append(ev)
                    row["time/eval"] = ev["time/eval"]
                    self.say(f"eval after step {step + 1}: held-out reward {ev['eval_reward']:.3f}")
                t_ck = time.time()
                if (cfg.run.checkpoint_every and (step + 1) % cfg.run.checkpoint_every == 0) or (
                    step + 1 == cfg.run.steps
                ):
                    await asyncio.to_thread(self.save_checkpoint)
                row["time/checkpoint"] = time.time() - t_ck
                row["time/step"] = time.time() - t_step
                self.log.write(row)
                if cfg.logging.plot:
                    plot_curves(read_jsonl(self.log.path), self.out / "curves.png")
                self.say(self._step_line(row))
        finally:
            for t in pending.values():
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t

    async def _update(
        self, step: int, results: Sequence[RolloutResult], records: dict[str, list[dict[str, Any]]]
    ) -> dict[str, Any]:
        cfg = self.cfg
        row: dict[str, Any] = {"kind": "train", "step": step + 1}
        ok = [x for x in results if x.status is not RolloutStatus.INFRA_ERROR]
        row["n_rollouts"] = len(results)
        row["n_infra_errors"] = len(results) - len(ok)
        for st in RolloutStatus:
            row[f"status/{st.value}"] = sum(1 for x in results if x.status is st)
        rewards = [x.reward for x in ok]
        row["reward_mean"], row["reward_std"] = _mean_std(rewards)
        row["pass_rate"] = _mean_std([float(x.reward >= 1.0) for x in ok])[0]
        for h in sorted({x.harness for x in results}):
            hr = [x.reward for x in ok if x.harness == h]
            row[f"reward_mean/{h}"], row[f"reward_std/{h}"] = _mean_std(hr)
            row[f"pass_rate/{h}"] = _mean_std([float(v >= 1.0) for v in hr])[0]
        recs = [rec for x in ok for rec in records.get(x.rollout_id, [])]
        row["tokens_prompt"] = sum(len(rec.get("prompt_ids") or []) for rec in recs)
        row["tokens_generated"] = sum(len(rec.get("completion_ids") or []) for rec in recs)
        lps = [lp for rec in recs for lp in (rec.get("completion_logprobs") or [])]
        row["entropy_estimate"] = -statistics.fmean(lps) if lps else None
        # staleness bound (asynchronous mode)
        version = self.state.policy_version
        data = []
        stale = 0
        for x in ok:
            recs_x = records.get(x.rollout_id, [])
            versions = [int(rr.get("policy_version") or 0) for rr in recs_x]
            if (
                cfg.async_.enabled
                and versions
                and version - min(versions) > cfg.async_.max_staleness
            ):
                stale += 1
                continue
            data.append(
                RolloutData(x.rollout_id, x.group_id, x.task_id, x.harness, x.reward, recs_x)
            )
        row["stale_dropped"] = stale
        if cfg.algo.drop_zero_std_groups:
            by_group: dict[str, list[float]] = {}
            for d in data:
                by_group.setdefault(d.group_id, []).append(d.reward)
            flat = {g for g, rs in by_group.items() if max(rs) == min(rs)}
            row["zero_std_groups"] = len(flat)
            data = [d for d in data if d.group_id not in flat]
        t0 = time.time()
        built = build_group_trees(data, max_leaves=cfg.rollout.max_leaves, merge_groups=True)
        row["time/trees"] = time.time() - t0
        row.update(
            {
                "tree_tokens": built.unique_tokens,
                "flat_tokens": built.flat_tokens,
                "tree_compression": built.compression,
                "trajectories": built.n_trajectories,
                "dead_leaves": built.dead_leaves,
                "over_branched_dropped": built.dropped_rollouts,
                "side_path_calls": built.side_path_calls,
                "empty_rollouts": built.empty_rollouts,
            }
        )
        t0 = time.time()
        if built.trees:
            metrics = []
            for _ in range(cfg.algo.updates_per_step):
                self.rl_trainer.policy_version = version
                metrics.append(
                    await asyncio.to_thread(
                        self.rl_trainer.rl_step, built.trees, built.rewards, groups=built.groups
                    )
                )
            # the first update is on-policy: its logprob mismatch is trainer vs engine; later
            # ones see the weights the earlier ones moved (their losses: *_last)
            row.update(metrics[0])
            if len(metrics) > 1:
                row.update(
                    {
                        f"{k}_last": metrics[-1][k]
                        for k in ("loss", "policy_loss", "mean_abs_logprob_diff")
                        if k in metrics[-1]
                    }
                )
        else:
            row["update_skipped"] = True
        row["time/update"] = time.time() - t0
        return row

    def _step_line(self, row: dict[str, Any]) -> str:
        def f(k: str, fmt: str = ".3f") -> str:
            v = row.get(k)
            return format(v, fmt) if isinstance(v, int | float) else "-"

        return (
            f"step {row['step']}/{self.cfg.run.steps} v{row['policy_version']}: reward "
            f"{f('reward_mean')}±{f('reward_std')} pass {f('pass_rate')} "
            f"tokens {row.get('tokens_generated')} compression {f('tree_compression', '.1f')}x "
            f"|Δlp| {f('mean_abs_logprob_diff', '.2e')} grad {f('grad_norm')} "
            f"({f('time/step', '.0f')} s)"
        )

    def _finish(self) -> dict[str, Any]:
        rows = read_jsonl(self.out / "metrics.jsonl")
        if self.cfg.logging.plot and rows:
            plot_curves(rows, self.out / "curves.png")
        evals = [r for r in rows if r.get("kind") == "eval"]
        first_rl = [
            e
            for e in evals
            if e.get("tag") == "step-0" or str(e.get("tag", "")).startswith("coldstart-")
        ]
        summary: dict[str, Any] = {
            "steps": self.state.next_step,
            "policy_version": self.state.policy_version,
            "eval_before_rl": first_rl[-1]["eval_reward"] if first_rl else None,
            "eval_final": evals[-1]["eval_reward"] if evals else None,
            "evals": [
                {k: e.get(k) for k in ("tag", "eval_reward", "eval_pass_rate", "policy_version")}
                for e in evals
            ],
        }
        if summary["eval_before_rl"] is not None and summary["eval_final"] is not None:
            summary["eval_gain"] = summary["eval_final"] - summary["eval_before_rl"]
        (self.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        return summary


def run_training(
    config: TrainConfig, *, resume: bool = False, say: Say | None = None
) -> dict[str, Any]:
    """Run :class:`TrainLoop` to the end in a new event loop; returns its summary."""
    return asyncio.run(TrainLoop(config, resume=resume, say=say).run())
