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
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import torch
from clawrl.bench import (
    HostVerificationError,
    LocalExecutor,
    ModelEndpoint,
    RolloutEvent,
    RolloutOptions,
    RolloutResult,
    RolloutRunner,
    SandboxExecutor,
    SessionHook,
    Task,
    TaskLoadError,
    check_host_verification,
    generate_chore_tasks,
    generate_learnable_tasks,
    load_builtin_suite,
    load_suite,
    plan_rollouts,
)
from clawrl.bench.harness import HarnessAdapter, get_harness
from clawrl.proxy import (
    BackendConfig,
    InferenceBackend,
    ModelKitError,
    make_backend,
    resolve_model,
    serve,
)
from clawrl.rl_core.config import TrainerConfig
from clawrl.rl_core.errors import ConfigError
from clawrl.rl_core.precision import resolve_precision
from clawrl.rl_core.train.checkpoints import (
    LoopState,
    latest_checkpoint,
    load_reference_policy,
    save_checkpoint,
)
from clawrl.rl_core.train.cold_start import run_cold_start, scripted_turns
from clawrl.rl_core.train.config import TrainConfig
from clawrl.rl_core.train.context import RunContext
from clawrl.rl_core.train.errors import TrainError
from clawrl.rl_core.train.metrics_log import MetricsLog, plot_curves, read_jsonl
from clawrl.rl_core.train.ranks import DrivenTrainer, Ranks, load_policy
from clawrl.rl_core.train.rollouts_log import write_eval_rollouts, write_step_rollouts
from clawrl.rl_core.train.rows import (
    drop_small_groups,
    eval_row,
    prefix_cache_row,
    rollout_row,
    scored,
    step_line,
    summary,
    tree_row,
)
from clawrl.rl_core.train.trees import (
    BuiltTrees,
    RolloutData,
    build_group_trees,
    shuffled_rewards,
)
from clawrl.rl_core.trainer import Trainer, seed_everything
from clawrl.sandbox import SandboxHosts, owned_tempdir

__all__ = ["TrainError", "TrainLoop", "run_training", "scripted_turns"]


Say = Callable[[str], None]


def _backend_stats(ctx: RunContext) -> dict[str, Any] | None:
    """A copy of the backend's counters (the embedded backend's prefill / prefix-cache
    figures), ``None`` for a backend without them."""
    stats = getattr(ctx.backend, "stats", None)
    return dict(stats) if isinstance(stats, dict) else None


class TrainLoop:
    """One ``train`` run (see the module docstring).

    Args:
        config: the resolved :class:`TrainConfig`.
        resume: continue from ``<run.out>/checkpoints/latest``.
        say: where progress lines go (default: print).
        ranks: under ``accelerate launch`` with several processes, rank 0's
            :class:`~clawrl.rl_core.train.ranks.Ranks` (this loop is rank 0; the others run
            :func:`~clawrl.rl_core.train.ranks.follow`): its trainers drive theirs, and each
            batch is merged into one tree per rank.
    """

    def __init__(
        self,
        config: TrainConfig,
        *,
        resume: bool = False,
        say: Say | None = None,
        ranks: Ranks | None = None,
    ):
        self.cfg = config
        self.resume = resume
        self.ranks = ranks
        self.say: Say = say or print
        self.out = Path(config.run.out)
        self.ckpt_dir = self.out / "checkpoints"
        self.state = LoopState()
        self.run_id = f"train-{uuid.uuid4().hex[:8]}"
        self._verify_executor: SandboxExecutor | None = None
        self._serve_rows: dict[int, dict[str, float]] = {}  # step -> prefix_cache_row
        hosts = config.rollout.hosts()
        self.sandbox_hosts: SandboxHosts | None = SandboxHosts(hosts) if hosts else None
        self.log: MetricsLog | None = None
        self.user_model_dir: Path | None = None  # rollout.user_model, resolved
        self.progress: Callable[[RolloutEvent], None] | None = None
        # "auto" precisions resolve once per process (a resume may run on another machine):
        # the embedded backend's dtype (None: not embedded) and the updates' precision, as
        # the trainer resolves it on its own device
        b = config.backend
        self.serving_dtype = resolve_precision(b.dtype, b.device) if b.kind == "embedded" else None
        self.update_precision = resolve_precision(
            config.algo.trainer.precision, "cuda" if torch.cuda.is_available() else "cpu"
        )

    # ------------------------------------------------------------------ setup
    def _model_dir(self) -> Path:
        m = self.cfg.model
        if m.path:
            try:  # an HF directory, or a model kit name (fetched once, then cached)
                return resolve_model(os.path.expanduser(m.path))
            except ModelKitError as exc:
                raise ConfigError(f"[model] path: {exc}") from exc
        return m.build()

    def _tasks(self) -> tuple[list[Task], list[Task]]:
        t = self.cfg.tasks
        if t.family == "learnable":
            root = self.out / "tasks"
            kw = {"n_names": t.learnable_names or None, "n_words": t.learnable_words or None}
            seed, reward = self.cfg.run.seed, t.learnable_reward
            try:
                train = generate_learnable_tasks(
                    root / "train", "train", t.train_n, seed, reward=reward, **kw
                )
                held = generate_learnable_tasks(
                    root / "heldout", "heldout", t.heldout_n, t.heldout_seed, reward=reward, **kw
                )
            except ValueError as exc:
                raise ConfigError(f"[tasks]: {exc}") from exc
            return train, held
        if t.family == "chores":
            root, seed = self.out / "tasks", self.cfg.run.seed
            templates = t.chores_templates or None
            try:
                train = generate_chore_tasks(
                    root / "train", "train", t.train_n, seed, templates=templates
                )
                held = generate_chore_tasks(
                    root / "heldout", "heldout", t.heldout_n, t.heldout_seed, templates=templates
                )
            except ValueError as exc:
                raise ConfigError(f"[tasks]: {exc}") from exc
            return train, held
        try:
            tasks = list(load_builtin_suite() if t.family == "builtin" else load_suite(t.path))
            held = list(load_suite(t.heldout_path)) if t.heldout_path else tasks
        except TaskLoadError as exc:
            raise ConfigError(f"[tasks]: {exc}") from exc
        if not tasks or not held:
            raise ConfigError(
                f"[tasks]: no tasks found in {t.path if not tasks else t.heldout_path}"
            )
        return tasks, held

    # ------------------------------------------------------------------ weights
    async def sync_weights(self, ctx: RunContext, version: int) -> float:
        """Pause the proxy, load the policy's weights into the backend at ``version``,
        resume. Returns seconds taken.

        Raises:
            TrainError: the backend reports another version afterwards.
        """
        from clawrl.proxy import EmbeddedBackend
        from clawrl.rl_core.lora import merged_state_dict

        endpoint, backend = ctx.endpoint, ctx.backend
        t0 = time.time()
        await endpoint.admin.pause()
        try:
            if isinstance(backend, EmbeddedBackend):
                state = merged_state_dict(self.policy)  # W + scale·BA under [algo] lora
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
    def runner(
        self,
        endpoint: ModelEndpoint,
        *,
        max_turns: int | None = None,
        session_hook: SessionHook | None = None,
        run_id: str | None = None,
        scripted: bool = False,
    ) -> RolloutRunner:
        r = self.cfg.rollout
        opts = RolloutOptions(
            max_turns=max_turns or r.max_turns,
            max_tokens=None if scripted else r.max_tokens,
            agent_timeout_s=r.agent_timeout_s,
            timeout_reference_tps=r.timeout_reference_tps or None,
            retries=r.retries,
        )
        return RolloutRunner(
            endpoint,
            opts,
            concurrency=r.concurrency,
            run_id=run_id or self.run_id,
            progress=self.progress,
            session_hook=session_hook,
            sandbox_hosts=self.sandbox_hosts,
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

    async def evaluate(self, ctx: RunContext, tag: str) -> dict[str, Any]:
        """Mean reward, pass rate (with its task-clustered standard error) and verifier
        sub-scores on the held-out tasks at the current weights
        (:func:`~clawrl.rl_core.train.rows.eval_row`), at the training temperature and, with
        ``eval.greedy``, once more with greedy decoding (``eval_greedy_*`` keys)."""
        t0 = time.time()
        before = _backend_stats(ctx)
        row = await self._eval_pass(ctx, tag, "eval")
        if self.cfg.eval.greedy:
            r = self.cfg.rollout
            await ctx.endpoint.admin.set_sampling(
                temperature=0.0, top_p=1.0, top_k=-1, max_tokens=r.max_tokens
            )
            try:
                greedy = await self._eval_pass(ctx, f"{tag}-greedy", "eval_greedy")
            finally:
                await ctx.endpoint.admin.set_sampling(
                    temperature=r.temperature, top_p=1.0, top_k=-1, max_tokens=r.max_tokens
                )
            row.update({k: v for k, v in greedy.items() if k.startswith("eval_greedy_")})
        row.update(prefix_cache_row(before, _backend_stats(ctx)))
        row["time/eval"] = time.time() - t0
        return row

    async def _eval_pass(self, ctx: RunContext, tag: str, prefix: str) -> dict[str, Any]:
        """One pass over the held-out tasks at the proxy's current sampling."""
        harnesses = list(ctx.eval_harnesses or ctx.harnesses)
        specs = plan_rollouts(
            list(ctx.held),
            harnesses,
            self.cfg.eval.samples,
            group_prefix=f"eval-{tag}/",
            seed=self.cfg.run.seed,
        )
        results = await self.runner(ctx.endpoint).run(specs)
        write_eval_rollouts(self.out, tag, results)  # per task and harness, for bench view
        return eval_row(
            results, [h.name for h in harnesses], tag, self.state.policy_version, prefix=prefix
        )

    async def record_eval(self, ctx: RunContext, tag: str, **fields: int) -> dict[str, Any]:
        """:meth:`evaluate`, with ``fields`` (``step``, ``sft_step``) added, written to the
        metrics log and kept in the loop state's evals (checkpointed)."""
        row = await self.evaluate(ctx, tag)
        row.update(fields)
        assert self.log is not None
        self.log.write(row)
        self.state.evals.append(row)
        return row

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self) -> Path:
        """Write ``checkpoints/step-NNNNNN`` atomically (trainer state + loop state), point
        ``checkpoints/latest`` at it, keep the newest ``run.keep_checkpoints``
        (:func:`~clawrl.rl_core.train.checkpoints.save_checkpoint`)."""
        return save_checkpoint(
            self.ckpt_dir, self.rl_trainer, self.state, self.cfg.run.keep_checkpoints
        )

    # ------------------------------------------------------------------ main
    async def run(self) -> dict[str, Any]:
        """Run (or resume) the whole loop; returns a summary (also ``summary.json``).

        Raises:
            ConfigError: among others, ``rollout.verifier = "host"`` for tasks whose verifier
                executes workspace code (before any rollout).
            TrainError: the cold start solved nothing, or a weight sync failed.
        """
        train, held, harnesses, latest = await self._prepare()
        backend = self._backend()
        hosts = self.sandbox_hosts or contextlib.nullcontext()
        async with self.serve_backend(backend) as endpoint, hosts, self._user_proxy() as user:
            named = self.cfg.eval.harnesses
            evals = [get_harness(h) for h in named] if named else harnesses
            for adapter in {id(a): a for a in [*harnesses, *evals]}.values():
                if adapter.plays_user and user is not None:
                    adapter.user_endpoint = user
            ctx = RunContext(endpoint, backend, train, held, harnesses, evals)
            r = self.cfg.rollout
            await endpoint.admin.set_sampling(
                temperature=r.temperature, top_p=1.0, top_k=-1, max_tokens=r.max_tokens
            )
            if self.cfg.cold_start.enabled and not self.state.cold_start_done:
                await run_cold_start(self, ctx)
            await self._start_rl(ctx, latest)
            await self._eval_before_rl(ctx)
            await self._rl_steps(ctx)
        if self._verify_executor is not None:
            await asyncio.to_thread(self._verify_executor.close)
        assert self.log is not None
        self.log.close()
        return self._finish()

    async def _prepare(self) -> tuple[list[Task], list[Task], list[HarnessAdapter], Path | None]:
        """The run folder (config, one ``runs.jsonl`` line per process), leftovers of dead
        runs removed, the seed, model, tasks (``verifier = "host"`` refused for tasks whose
        verifier runs workspace code), harnesses, metrics log, policy and — on resume — the
        loop state of the latest checkpoint (returned, or None)."""
        cfg = self.cfg
        harnesses = [get_harness(h) for h in cfg.rollout.harnesses]  # checked by the config
        # the model and the tasks first: a typo in either leaves no run folder behind
        self.model_dir = await asyncio.to_thread(self._model_dir)
        if cfg.rollout.user_model:
            try:
                self.user_model_dir = await asyncio.to_thread(
                    resolve_model, os.path.expanduser(cfg.rollout.user_model)
                )
            except (ModelKitError, ValueError, OSError) as exc:
                raise ConfigError(f"[rollout] user_model: {exc}") from exc
        train, held = await asyncio.to_thread(self._tasks)
        await self._open_run_dir()
        seed_everything(cfg.run.seed)
        if cfg.rollout.verifier == "host":  # refused before any rollout for such tasks
            try:
                check_host_verification([*train, *held], LocalExecutor())
            except HostVerificationError as exc:
                raise ConfigError(f"rollout.verifier = 'host': {exc}") from exc
        self.log = MetricsLog(
            self.out,
            tensorboard=cfg.logging.tensorboard,
            wandb=cfg.logging.wandb,
            wandb_project=cfg.logging.wandb_project,
            config=cfg.to_dict(),
        )
        self.policy = load_policy(self.model_dir)
        return train, held, harnesses, self._resumed_state()

    async def _open_run_dir(self) -> None:
        from clawrl.sandbox import gc as sandbox_gc
        from clawrl.sandbox import gc_tempdirs

        self.out.mkdir(parents=True, exist_ok=True)
        self.ckpt_dir.mkdir(exist_ok=True)
        self.cfg.save(self.out / "config.json")
        line = {"run_id": self.run_id, "pid": os.getpid(), "started": time.time()}
        serving, updates = self.serving_dtype, self.update_precision
        line |= {"backend_dtype": serving, "precision": updates}
        if "auto" in (self.cfg.backend.dtype, self.cfg.algo.trainer.precision):
            self.say(f"precision auto: serving {serving or 'n/a'}, updates {updates}")
        with (self.out / "runs.jsonl").open("a") as f:  # one line per process (resumes)
            f.write(json.dumps({**line, "resume": self.resume}) + "\n")
        removed = await sandbox_gc()
        if removed:
            self.say(f"removed {len(removed)} sandbox(es) left by dead runs")
        stale = await asyncio.to_thread(gc_tempdirs)
        if stale:
            self.say(
                f"removed {len(stale)} temporary director"
                f"{'y' if len(stale) == 1 else 'ies'} left by dead runs"
            )

    def _resumed_state(self) -> Path | None:
        """On ``--resume``: the latest checkpoint, its loop state loaded and the metrics
        rows of the steps after it moved aside (they run again)."""
        latest = latest_checkpoint(self.ckpt_dir) if self.resume else None
        if self.resume and latest is None:
            self.say("no checkpoint to resume from: starting afresh")
        if latest is not None:
            assert self.log is not None
            self.state = LoopState.load(latest)
            moved = self.log.supersede_after(self.state.next_step)
            if moved:
                self.say(
                    f"{moved} metrics row(s) of steps after {latest.name} moved to "
                    "metrics.superseded.jsonl (those steps run again)"
                )
        return latest

    async def _start_rl(self, ctx: RunContext, latest: Path | None) -> None:
        """The RL trainer (and the KL reference model when ``kl_coef > 0``); on resume its
        checkpoint is loaded and the weights synced at the checkpoint's policy version."""
        cfg = self.cfg
        kl = cfg.algo.trainer.loss.kl_coef
        # with LoRA the reference is the policy with its adapters disabled (no copy): the
        # base weights, which are the policy as RL starts and are in every checkpoint
        lora = cfg.algo.trainer.lora is not None
        self.ref_model = copy.deepcopy(self.policy).eval() if kl > 0 and not lora else None
        self.rl_trainer = self.new_trainer(cfg.trainer_config(), ref_model=self.ref_model)
        if latest is not None:
            await asyncio.to_thread(self.rl_trainer.load_checkpoint, latest)
            self.say(
                f"resumed from {latest.name}: step {self.state.next_step}, "
                f"policy version {self.state.policy_version}"
            )
            await self.sync_weights(ctx, self.state.policy_version)
        elif cfg.cold_start.enabled:
            self.save_checkpoint()
        if self.ref_model is not None:
            await asyncio.to_thread(
                load_reference_policy,
                self.ckpt_dir,
                self.ref_model,
                self.policy,
                warn_missing=latest is not None and self.state.next_step > 0,
                say=self.say,
            )
            if isinstance(self.rl_trainer, DrivenTrainer):
                await asyncio.to_thread(self.rl_trainer.sync_reference)

    def new_trainer(
        self, config: TrainerConfig, *, ref_model: torch.nn.Module | None = None
    ) -> Trainer:
        """A Trainer of the policy; with several processes one that drives the other ranks'
        (:class:`~clawrl.rl_core.train.ranks.DrivenTrainer`)."""
        if self.ranks is None:
            return Trainer(self.policy, config, ref_model=ref_model)
        return DrivenTrainer(self.ranks, self.model_dir, self.policy, config, ref_model=ref_model)

    async def _eval_before_rl(self, ctx: RunContext) -> None:
        """The ``step-0`` eval, unless resumed past it or the cold start already evaluated."""
        cfg = self.cfg
        if self.state.next_step or not cfg.eval.enabled:
            return
        if cfg.cold_start.enabled and self.state.evals:
            return
        row = await self.record_eval(ctx, "step-0", step=0)
        self.say(f"eval before RL: held-out reward {row['eval_reward']:.3f}")

    def serve_backend(
        self, backend: InferenceBackend
    ) -> AbstractAsyncContextManager[ModelEndpoint]:
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
            # a call longer than one forward can hold could not be trained on: the proxy
            # answers it with the typed context-length error (a context-overflow rollout)
            max_context=self.cfg.algo.trainer.token_budget,
        )

    @contextlib.asynccontextmanager
    async def _user_proxy(self) -> AsyncIterator[ModelEndpoint | None]:
        """``rollout.user_model`` served by an embedded backend of its own (None: unset)."""
        model_dir = self.user_model_dir
        if model_dir is None:
            yield None
            return
        b = self.cfg.backend
        backend = make_backend(
            BackendConfig(
                kind="embedded",
                model_dir=model_dir,
                dtype=resolve_precision(b.dtype, "cpu"),
                max_batch_size=b.max_batch_size,
                num_threads=b.num_threads,
                seed=self.cfg.run.seed * 1000 + 999,
            )
        )
        async with serve(
            backend,
            model_dir,
            capture_dir=self.out / "capture-user",
            in_thread=False,
            tempdir=owned_tempdir,
            tempdir_prefix="clawrl-train-user-",
        ) as endpoint:
            yield endpoint

    def _backend(self) -> InferenceBackend:
        b = self.cfg.backend
        if b.kind == "embedded":
            config = BackendConfig(
                kind="embedded",
                model_dir=self.model_dir,
                device=b.device,
                max_batch_size=b.max_batch_size,
                dtype=self.serving_dtype or "fp32",
                num_threads=b.num_threads,
                prefix_cache_mib=b.prefix_cache_mib,
                seed=self.cfg.run.seed * 1000 + self.state.next_step,
                policy_version=self.state.policy_version,
            )
        else:
            config = BackendConfig(
                kind=b.kind,
                sglang_url=b.sglang_url,
                sglang_router=b.sglang_router,
                sglang_worker_urls=tuple(b.sglang_worker_urls),
            )
        return make_backend(config)

    def _sample_tasks(self, train: Sequence[Task], step: int) -> list[Task]:
        rng = random.Random(f"{self.cfg.run.seed}:{step}")
        k = min(self.cfg.tasks.tasks_per_step, len(train))
        return rng.sample(list(train), k)

    async def _collect(
        self, ctx: RunContext, step: int
    ) -> tuple[list[RolloutResult], dict[str, list[dict[str, Any]]], float]:
        t0 = time.time()
        specs = plan_rollouts(
            self._sample_tasks(ctx.train, step),
            list(ctx.harnesses),
            self.cfg.rollout.samples,
            group_prefix=f"s{step}/",
            seed=self.cfg.run.seed,
        )
        before = _backend_stats(ctx)
        results = await self.runner(ctx.endpoint).run(specs)
        # with async rollouts, collections overlap: each step's figures then include theirs
        self._serve_rows[step] = prefix_cache_row(before, _backend_stats(ctx))
        # final: the runner read them after close_session, which waits for every commit
        records = {x.rollout_id: list(x.records) for x in results}
        return results, records, time.time() - t0

    async def _rl_steps(self, ctx: RunContext) -> None:
        cfg = self.cfg
        assert self.log is not None
        ahead = cfg.async_.max_staleness if cfg.async_.enabled else 0
        pending: dict[int, asyncio.Task[Any]] = {}
        try:
            for step in range(self.state.next_step, cfg.run.steps):
                for s in range(step, min(cfg.run.steps, step + ahead + 1)):
                    if s not in pending:
                        pending[s] = asyncio.ensure_future(self._collect(ctx, s))
                t_step = time.time()
                results, records, t_roll = await pending.pop(step)
                t_wait = time.time() - t_step  # async mode: what the trainer waited for
                row = await self._update(step, results, records)
                row.update(self._serve_rows.pop(step, {}))
                row["time/rollout"] = t_wait if cfg.async_.enabled else t_roll
                row["time/sync"] = await self.sync_weights(ctx, self.state.policy_version + 1)
                row["policy_version"] = self.state.policy_version
                self.state.next_step = step + 1
                if cfg.eval.enabled and (
                    (cfg.eval.every and (step + 1) % cfg.eval.every == 0)
                    or step + 1 == cfg.run.steps
                ):
                    ev = await self.record_eval(ctx, f"step-{step + 1}", step=step + 1)
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
        """One RL step's update: the rollout figures, the group trees of the usable rollouts
        (:meth:`_rollout_data`) and ``algo.updates_per_step`` trainer steps on them."""
        row: dict[str, Any] = {"kind": "train", "step": step + 1, **rollout_row(results, records)}
        data = self._rollout_data(results, records, row)
        t0 = time.time()
        built = build_group_trees(
            data,
            max_leaves=self.cfg.rollout.max_leaves,
            merge_groups=True,
            parts=self.ranks.world_size if self.ranks is not None else 1,
        )
        row["time/trees"] = time.time() - t0
        row.update(tree_row(built))
        t0 = time.time()
        self.rl_trainer.last_update = None
        if built.trees:
            row.update(await self._train_on(built))
            # every advantage 0 (and nothing else trained): no optimizer step, weights kept
            row["skipped_update"] = bool(row.get("skipped_update"))
        else:
            row["update_skipped"] = row["skipped_update"] = True
        row["time/update"] = time.time() - t0
        update = self.rl_trainer.last_update
        write_step_rollouts(self.out, step + 1, results, built, update)  # for `bench view`
        return row

    def _rollout_data(
        self,
        results: Sequence[RolloutResult],
        records: dict[str, list[dict[str, Any]]],
        row: dict[str, Any],
    ) -> list[RolloutData]:
        """The scored rollouts to train on (harness-health failures, infra- and env-errors
        left out: :func:`scored`): in asynchronous mode those whose oldest call is
        more than ``max_staleness`` policy versions behind are dropped (``stale_dropped``);
        under GRPO so are the groups left with fewer than 2 members
        (``small_groups_dropped``: their advantage would be 0);
        with ``algo.drop_zero_std_groups`` so are groups whose rewards are all equal
        (``zero_std_groups``)."""
        cfg = self.cfg
        version = self.state.policy_version
        data = []
        stale = 0
        for x in scored(results):
            recs = records.get(x.rollout_id, [])
            versions = [int(rr.get("policy_version") or 0) for rr in recs]
            too_old = versions and version - min(versions) > cfg.async_.max_staleness
            if cfg.async_.enabled and too_old:
                stale += 1
                continue
            data.append(RolloutData(x.rollout_id, x.group_id, x.task_id, x.harness, x.reward, recs))
        row["stale_dropped"] = stale
        if cfg.algo.name == "grpo":
            data, row["small_groups_dropped"] = drop_small_groups(data, lambda d: d.group_id)
        if cfg.algo.drop_zero_std_groups:
            by_group: dict[str, list[float]] = {}
            for d in data:
                by_group.setdefault(d.group_id, []).append(d.reward)
            flat = {g for g, rs in by_group.items() if max(rs) == min(rs)}
            row["zero_std_groups"] = len(flat)
            data = [d for d in data if d.group_id not in flat]
        if cfg.algo.shuffle_rewards:
            data = shuffled_rewards(data, random.Random(f"{cfg.run.seed}:shuffle:{row['step']}"))
            row["rewards_shuffled"] = True
        return data

    async def _train_on(self, built: BuiltTrees) -> dict[str, Any]:
        """``algo.updates_per_step`` trainer steps on ``built``'s trees; the first update's
        metrics (on-policy: its logprob mismatch is trainer vs engine), and the last one's
        losses as ``*_last`` (it sees the weights the earlier ones moved)."""
        metrics = []
        for _ in range(self.cfg.algo.updates_per_step):
            self.rl_trainer.policy_version = self.state.policy_version
            metrics.append(
                await asyncio.to_thread(
                    self.rl_trainer.rl_step, built.trees, built.rewards, groups=built.groups
                )
            )
        row = dict(metrics[0])
        if len(metrics) > 1:
            last = metrics[-1]
            keys = ("loss", "policy_loss", "mean_abs_logprob_diff")
            row.update({f"{k}_last": last[k] for k in keys if k in last})
        return row

    def _step_line(self, row: dict[str, Any]) -> str:
        return step_line(row, self.cfg.run.steps)

    def _finish(self) -> dict[str, Any]:
        rows = read_jsonl(self.out / "metrics.jsonl")
        if self.cfg.logging.plot and rows:
            plot_curves(rows, self.out / "curves.png")
        out = summary(rows, self.state.next_step, self.state.policy_version)
        (self.out / "summary.json").write_text(json.dumps(out, indent=2) + "\n")
        return out


def run_training(
    config: TrainConfig, *, resume: bool = False, say: Say | None = None
) -> dict[str, Any]:
    """Run :class:`TrainLoop` to the end in a new event loop; returns its summary."""
    return asyncio.run(TrainLoop(config, resume=resume, say=say).run())
