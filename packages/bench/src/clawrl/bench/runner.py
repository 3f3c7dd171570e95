"""The rollout runner: tasks × samples × harnesses, one sandbox and one proxy session each.

A *rollout* is one harness run on one task against the model, scored by the task's
verifier. For each rollout the runner

1. builds the task's initial workspace on the host (:func:`~clawrl.bench.prepare_workspace`);
2. opens a proxy session through the admin API with the metadata ``run_id``, ``task_id``,
   ``harness``, ``group_id`` (one GRPO group = the samples of one task through one harness)
   and ``sample_index``, ``attempt``, ``rollout_id``, ``category``;
3. creates a podman sandbox (clawrl.sandbox) holding the workspace at the task's
   ``workspace_path``, the harness runtime mounted read-only, the proxy's model socket at
   ``/run/clawrl/model.sock`` and the forwarder on ``127.0.0.1:8000``, sized from the task's
   limits, ``--network none``;
4. lets the adapter write its config files, starts the harness with the task's agent
   timeout, then SIGKILLs every process the agent left (from the host), collects the
   harness's own logs and copies the final workspace out from the host, within
   :meth:`RolloutRunner.copy_limits` (the sandbox has a wall clock of the agent timeout
   + 300 s, so a leaked one ends by itself);
5. for a verifier that sees the whole container
   (:attr:`~clawrl.bench.VerifierSpec.verify_on_snapshot`: Harbor, Terminal-Bench 1),
   records what the agent changed outside the workspace (:func:`~clawrl.bench.agent_state`,
   ``timing["snapshot"]``, listed in :attr:`RolloutResult.outside_changes`) and, before
   the kill, the processes it left running: a verdict below full marks then is a
   ``verifier-error`` that names them (the verifier's sandbox runs none of them);
6. destroys the sandbox, verifies the workspace in a fresh sandbox (tamper-proof, see
   :func:`~clawrl.bench.verify`; with the recorded state restored there first), computes
   the workspace diff, reads the session's call records and closes the session.

Statuses: :class:`RolloutStatus` (in :mod:`clawrl.bench.rollout_types`).

Use :func:`run_rollouts` for one batch, or keep a :class:`RolloutRunner` (the RL loop's
path: one runner, many batches). :func:`clawrl.proxy.serve` starts an in-process proxy with any
backend and yields its :class:`~clawrl.proxy.ModelEndpoint`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, TypedDict, Unpack

from clawrl.bench.executors import Executor
from clawrl.bench.harness import (
    HARNESS_LOG_DIR,
    HarnessAdapter,
    HarnessContext,
    HarnessInstallError,
    HarnessLaunch,
    HarnessTurn,
    get_harness,
)
from clawrl.bench.rollout_health import classify_harness_health
from clawrl.bench.rollout_types import (
    ProgressCallback,
    RolloutEvent,
    RolloutOptions,
    RolloutResult,
    RolloutSpec,
    RolloutStatus,
    SessionHook,
    rollout_sampling_seed,
)
from clawrl.bench.runner_helpers import (
    _close_quietly,
    _collect_logs,
    _left_running,
    _outside_changes,
    _refused,
    _result,
    _verify_never_raises,
)
from clawrl.bench.sandbox_executor import SandboxExecutor
from clawrl.bench.task import Task
from clawrl.bench.task_env import TaskEnvironments
from clawrl.bench.task_image import TaskImage, TaskImageError
from clawrl.bench.tasks import layout_of
from clawrl.bench.timeouts import timeout_scale
from clawrl.bench.verify import (
    VerifierResult,
    VerifierStatus,
    agent_state,
    check_host_verification,
    prepare_workspace,
)
from clawrl.bench.workspace_diff import FileChange, workspace_diff
from clawrl.proxy import (
    AsyncAdminClient,
    InferenceBackend,
    ModelEndpoint,
    ProxyError,
    SessionInfo,
    measure_decode_rate,
    serve,
)
from clawrl.sandbox import (
    CopyLimits,
    ExecResult,
    Limits,
    Sandbox,
    SandboxCopyLimitError,
    SandboxError,
    SandboxHosts,
    SandboxSpec,
    kill_all_but,
    left_processes,
    owned_tempdir,
)

__all__ = [
    "ModelEndpoint",
    "RolloutEvent",
    "RolloutOptions",
    "RolloutResult",
    "RolloutRunner",
    "RolloutSpec",
    "RolloutStatus",
    "RunnerOptions",
    "plan_rollouts",
    "run_rollouts",
]

_WRITABLE_ROOTS = ("/workspace", "/tmp", "/root")
# A sandbox outlives its agent timeout by at most this much (collecting logs and the
# workspace), even if the orchestrator dies: its PID 1 is a `sleep` of that length.
_WALL_CLOCK_SLACK_S = 300.0


def plan_rollouts(
    tasks: Sequence[Task],
    harnesses: Sequence[HarnessAdapter | str],
    samples: int = 1,
    group_prefix: str = "",
    seed: int | None = None,
) -> list[RolloutSpec]:
    """The rollouts of tasks × harnesses × samples, grouped per (task, harness).

    Group id: ``<group_prefix><task id>/<harness>``. Order: task-major, so that the samples
    of one group run close together. With ``seed``, each rollout's ``sampling_seed`` is
    :func:`rollout_sampling_seed` ``(seed, group_id, sample_index)``: the same plan samples
    the same streams in every run.
    """
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    adapters = [get_harness(h) for h in harnesses]
    specs = []
    for t, h, i in itertools.product(tasks, adapters, range(samples)):
        group = f"{group_prefix}{t.id}/{h.name}"
        sampling = None if seed is None else rollout_sampling_seed(seed, group, i)
        specs.append(
            RolloutSpec(task=t, harness=h, sample_index=i, group_id=group, sampling_seed=sampling)
        )
    return specs


class RunnerOptions(TypedDict, total=False):
    """The keyword options of :class:`RolloutRunner` that :func:`run_rollouts` passes on."""

    concurrency: int
    run_id: str | None
    progress: ProgressCallback | None
    session_hook: SessionHook | None
    verify_executor: Executor | None
    sandbox_image: str | None
    sandbox_hosts: SandboxHosts | None


class RolloutRunner:
    """Runs rollouts with a concurrency limit (one sandbox + one proxy session each).

    Args:
        endpoint: the proxy (``None`` is allowed only for harnesses without a model, e.g.
            the oracle).
        options: :class:`RolloutOptions`.
        concurrency: rollouts in flight at once (sandboxes alive at once).
        run_id: run id of the proxy sessions and sandbox labels (default: random).
        progress: called with every :class:`RolloutEvent` (from the event loop).
        session_hook: awaited after each session is created, before the harness starts
            (e.g. to script a ScriptedBackend session).
        verify_executor: executor of the verifier (default: a fresh podman sandbox per
            verification, :class:`~clawrl.bench.SandboxExecutor` keeping ``concurrency``
            single-use sandboxes warm during :meth:`run`). A
            :class:`~clawrl.bench.LocalExecutor` (host verification) is refused for tasks
            whose verifier executes workspace code: :meth:`run` raises before any rollout.
        sandbox_image: podman image of agent sandboxes (default: the host-``/usr`` root).
        sandbox_hosts: podman hosts of the agent sandboxes (default: the local podman); a host
            that goes down makes its rollouts ``infra-error`` and is excluded.
    """

    def __init__(
        self,
        endpoint: ModelEndpoint | None = None,
        options: RolloutOptions | None = None,
        *,
        concurrency: int = 4,
        run_id: str | None = None,
        progress: ProgressCallback | None = None,
        session_hook: SessionHook | None = None,
        verify_executor: Executor | None = None,
        sandbox_image: str | None = None,
        sandbox_hosts: SandboxHosts | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.endpoint = endpoint
        self.options = options or RolloutOptions()
        self.concurrency = concurrency
        self.run_id = run_id or f"bench-{uuid.uuid4().hex[:8]}"
        self.progress = progress
        self.session_hook = session_hook
        self.sandbox_image = sandbox_image
        self.sandbox_hosts = sandbox_hosts
        self._own_executor: SandboxExecutor | None = None
        if verify_executor is None:
            verify_executor = self._own_executor = SandboxExecutor(
                run_id=self.run_id, warm=concurrency
            )
        self.verify_executor = verify_executor
        self.environments = TaskEnvironments(self.run_id, enabled=self.options.task_images)
        self._prepared: dict[int, str | None] = {}  # id(adapter) -> install error or None
        #: agent timeouts are multiplied by this (measured per batch: clawrl.bench.timeouts)
        self.timeout_scale = 1.0

    def _emit(self, event: RolloutEvent) -> None:
        if self.progress is not None:
            self.progress(event)

    async def prepare(self, harnesses: Sequence[HarnessAdapter]) -> None:
        """Install / locate every harness runtime once (errors are remembered: those
        rollouts become ``infra-error``)."""
        for h in harnesses:
            if id(h) in self._prepared:
                continue

            def say(line: str, name: str = h.name) -> None:
                self._emit(RolloutEvent("message", None, 0, 0, message=f"[{name}] {line}"))

            try:
                await asyncio.to_thread(h.prepare, say)
                self._prepared[id(h)] = None
            except HarnessInstallError as exc:
                self._prepared[id(h)] = str(exc)

    async def run(self, specs: Sequence[RolloutSpec]) -> list[RolloutResult]:
        """Run ``specs`` (at most ``concurrency`` at once); results in the order of ``specs``.

        Raises:
            HostVerificationError: the verify executor is the host and some task's verifier
                executes workspace code (raised before any rollout runs).
            ValueError: a harness needs a model and the runner has no endpoint.
        """
        check_host_verification([s.task for s in specs], self.verify_executor)
        unique = {id(s.harness): s.harness for s in specs}
        await self.prepare(list(unique.values()))
        if self.endpoint is None and any(s.harness.needs_model for s in specs):
            raise ValueError("harnesses that need a model need a ModelEndpoint")
        if any(s.harness.needs_model for s in specs):
            await self.measure_speed()
        gate = asyncio.Semaphore(self.concurrency)
        total, done = len(specs), 0

        async def one(spec: RolloutSpec) -> RolloutResult:
            nonlocal done
            async with gate:
                self._emit(RolloutEvent("started", spec, done, total))
                result = await self.run_one(spec, _events=(done, total))
                done += 1
                self._emit(RolloutEvent("finished", spec, done, total, result=result))
                return result

        try:
            return list(await asyncio.gather(*(one(s) for s in specs)))
        except BaseException:
            # Cancelled (Ctrl-C) or failed: the verifier runs still going in threads are
            # cancelled (their sandboxes destroyed), so that no thread outlives the batch.
            await asyncio.to_thread(self._interrupt_verifiers)
            raise
        finally:
            if self._own_executor is not None:  # its warm sandboxes go; it warms again later
                await asyncio.to_thread(self._own_executor.close)
            await asyncio.to_thread(self.environments.close)

    async def measure_speed(self) -> float:
        """Set :attr:`timeout_scale` from the backend's decode speed, measured now (one short
        generation, :mod:`clawrl.bench.timeouts`; :meth:`run` calls it), and return it."""
        opts = self.options
        if self.endpoint is None or opts.timeout_reference_tps is None:
            return self.timeout_scale
        tps = await measure_decode_rate(self.endpoint, run_id=self.run_id, model=opts.model)
        self.timeout_scale = timeout_scale(tps, opts.timeout_reference_tps, opts.timeout_max_scale)
        if self.timeout_scale > 1.0:
            msg = (
                f"backend decodes {tps:.1f} tokens/s (reference {opts.timeout_reference_tps:g}):"
                f" agent timeouts x{self.timeout_scale:.2f}"
            )
            self._emit(RolloutEvent("message", None, 0, 0, message=msg))
        return self.timeout_scale

    def agent_timeout(self, task: Task) -> float:
        """The agent timeout of ``task`` in this batch: ``agent_timeout_s`` or the task's
        own, times :attr:`timeout_scale`."""
        return (self.options.agent_timeout_s or task.timeouts.agent_s) * self.timeout_scale

    def _interrupt_verifiers(self) -> None:
        if self._own_executor is not None:
            self._own_executor.interrupt()
        self.environments.interrupt()

    async def run_one(self, spec: RolloutSpec, _events: tuple[int, int] = (0, 1)) -> RolloutResult:
        """One rollout, retried on infrastructure failures only."""
        result: RolloutResult | None = None
        for attempt in range(self.options.retries + 1):
            result = await self._attempt(spec, attempt)
            if result.status is not RolloutStatus.INFRA_ERROR:
                break
            if attempt < self.options.retries:
                self._emit(RolloutEvent("retry", spec, *_events, result=result))
        assert result is not None
        return result

    # ----------------------------------------------------------------- one attempt

    def copy_limits(self, task: Task) -> CopyLimits:
        """Bounds of copying ``task``'s final workspace out of its sandbox: at most the
        workspace's size in bytes (a sparse file counts its apparent size), 100,000 entries,
        paths of 1,024 characters, 64 levels, 120 s. A bound that is hit fails the rollout
        (``harness-error``, reward 0, scored)."""
        memory = self.options.memory_mb or task.limits.memory_mb
        return CopyLimits(max_bytes=min(task.limits.storage_mb, memory) << 20)

    def sandbox_spec(
        self, spec: RolloutSpec, workspace: Path, image: TaskImage | None = None
    ) -> SandboxSpec:
        """The agent sandbox of rollout ``spec`` holding the host directory ``workspace``:
        sized from the task's limits, with a wall clock of the agent timeout + 300 s, in the
        task's built ``image`` (with the image's environment) if it has one, and never
        with a network beyond the model socket."""
        task, h = spec.task, spec.harness
        memory = self.options.memory_mb or task.limits.memory_mb
        agent_s = self.agent_timeout(task)
        ws_path = PurePosixPath(task.workspace_path)
        writable = any(
            ws_path == PurePosixPath(r) or PurePosixPath(r) in ws_path.parents
            for r in _WRITABLE_ROOTS
        )
        fields = TaskEnvironments.agent_fields(task, image, self.options.agent_network)
        # AgentBench tasks change the system (users, /etc): a writable root, which its
        # grader checks for tampering before it runs anything there
        graded_here = task.grader is not None and image is not None
        return SandboxSpec(
            image=fields["image"] or self.sandbox_image,
            files={task.workspace_path: workspace},
            env=fields["env"],
            network=fields["network"],
            user=fields["user"],
            limits=Limits(
                memory=f"{memory}m",
                cpus=task.limits.cpus,
                pids=max(64, task.limits.pids),
                workspace_size=f"{min(task.limits.storage_mb, memory)}m",
                wall_clock_s=agent_s + _WALL_CLOCK_SLACK_S,
            ),
            model_socket=(self.endpoint.model_socket if h.needs_model and self.endpoint else None),
            read_only_mounts=h.mounts(task),
            read_only_root=writable and not graded_here,
            labels={"clawrl-bench.task": task.id[:60], "clawrl-bench.harness": h.name},
        )

    async def _attempt(self, spec: RolloutSpec, attempt: int) -> RolloutResult:
        task, h, opts = spec.task, spec.harness, self.options
        t_start = time.time()
        timing: dict[str, float] = {"started": t_start}
        base: dict[str, Any] = {
            "rollout_id": spec.rollout_id,
            "task_id": task.id,
            "category": task.category,
            "difficulty": task.difficulty,
            "harness": h.name,
            "group_id": spec.group_id,
            "sample_index": spec.sample_index,
            "attempts": attempt + 1,
        }

        def infra(
            reason: str, status: RolloutStatus = RolloutStatus.INFRA_ERROR, **extra: Any
        ) -> RolloutResult:
            timing["finished"] = time.time()
            timing["total"] = timing["finished"] - t_start
            return RolloutResult(
                **base,
                status=status,
                reason=reason,
                timing=timing,
                **extra,
            )

        install_error = self._prepared.get(id(h))
        if install_error:
            return infra(f"harness runtime: {install_error}")
        try:
            image = await self.environments.image(task)
        except TaskImageError as exc:
            reason = f"task image: {exc.reason}\n{exc.log_tail}"
            return infra(reason.strip(), status=RolloutStatus.ENV_ERROR)
        timing["image"] = time.time() - t_start
        session: SessionInfo | None = None
        admin = self.endpoint.admin if self.endpoint else None
        with owned_tempdir("clawrl-rollout-") as tmp_name:
            tmp = Path(tmp_name)
            initial = prepare_workspace(task, tmp / "initial")
            final = tmp / "final"
            try:
                if h.needs_model:
                    assert admin is not None
                    session = await self._open_session(admin, spec, attempt)
                sb_spec = self.sandbox_spec(spec, initial, image)
                hosts = self.sandbox_hosts
                sb = await (hosts.create if hosts else Sandbox.create)(sb_spec, run_id=self.run_id)
            except (SandboxError, ProxyError, OSError) as exc:
                await _close_quietly(admin, session)
                return infra(f"setup: {type(exc).__name__}: {exc}")
            timing["setup"] = time.time() - t_start
            harness_out: dict[str, Any] = {}
            try:
                async with sb:
                    harness_out = await self._run_harness(
                        spec, sb, session, final, timing, built=image is not None
                    )
            except (SandboxError, OSError) as exc:
                extra: dict[str, Any] = {"session_id": session.session_id} if session else {}
                await _close_quietly(admin, session)
                return infra(f"sandbox: {type(exc).__name__}: {exc}", **extra)
            # records: close first (it returns once every call is committed): then final
            records: list[dict[str, Any]] = []
            if session is not None and admin is not None:
                try:
                    await admin.close_session(session.session_id)
                    records = [dict(r) for r in await admin.records(session.session_id)]
                except (ProxyError, OSError) as exc:
                    return infra(f"proxy records: {exc}", session_id=session.session_id)
            harness_out = classify_harness_health(harness_out, records, needs_model=h.needs_model)
            t_verify = time.time()
            verdict, diff = await self._verify(task, initial, final, harness_out, image)
            timing["verify_started"] = t_verify
            timing["verify"] = time.time() - t_verify
        timing["finished"] = time.time()
        timing["total"] = timing["finished"] - t_start
        return _result(base, harness_out, verdict, session, records, diff, timing, opts)

    async def _open_session(
        self, admin: AsyncAdminClient, spec: RolloutSpec, attempt: int
    ) -> SessionInfo:
        """The rollout's proxy session (metadata for the records), after the session hook."""
        task = spec.task
        session = await admin.create_session(
            run_id=self.run_id,
            task_id=task.id,
            harness=spec.harness.name,
            group_id=spec.group_id,
            metadata={
                "sample_index": spec.sample_index,
                "attempt": attempt,
                "rollout_id": spec.rollout_id,
                "category": task.category,
            },
            sampling_seed=spec.sampling_seed,
        )
        if self.session_hook is not None:
            await self.session_hook(session, spec)
        return session

    async def _verify(
        self,
        task: Task,
        initial: Path,
        final: Path,
        harness_out: dict[str, Any],
        image: TaskImage | None = None,
    ) -> tuple[VerifierResult, list[FileChange]]:
        """The verdict on the final workspace (reward 0 when the harness phase refused it),
        in the task's image if it has one, and the workspace diff."""
        if harness_out.get("graded") is not None:
            graded: VerifierResult = harness_out["graded"]
            return graded, workspace_diff(initial, final, self.options.diff_cap_bytes)
        if harness_out.get("refused"):
            refused = VerifierResult(
                reward=0.0, status=VerifierStatus.ERROR, reason=harness_out["reason"]
            )
            return refused, []
        executor = self.environments.verify_executor(task, image, self.verify_executor)
        state = harness_out.get("state")
        verdict = await asyncio.to_thread(_verify_never_raises, task, final, executor, state)
        verdict = _left_running(verdict, harness_out.get("left_processes") or [])
        try:
            diff = workspace_diff(initial, final, self.options.diff_cap_bytes)
        except OSError:  # e.g. a path too long for the host: no diff, the batch goes on
            diff = []
        return verdict, diff

    def _context(self, task: Task, session: SessionInfo | None, timeout: float) -> HarnessContext:
        """What the harness adapter is told about the rollout."""
        opts = self.options
        return HarnessContext(
            task=task,
            session_id=session.session_id if session else "",
            api_key=session.api_key if session else "",
            openai_base_url=session.openai_base_url if session else "",
            anthropic_base_url=session.anthropic_base_url if session else "",
            model=opts.model,
            max_turns=opts.max_turns,
            max_tokens=opts.max_tokens,
            timeout_s=timeout,
            log_dir=HARNESS_LOG_DIR,
        )

    async def _run_turns(
        self,
        h: HarnessAdapter,
        ctx: HarnessContext,
        sb: Sandbox,
        launch: HarnessLaunch,
        t0: float,
    ) -> tuple[ExecResult, HarnessLaunch]:
        """The harness's runs: ``launch``, then each :meth:`HarnessAdapter.follow_up` after a
        run that exited 0, all within the rollout's time limit. Returns the last run's result
        (its stdout / stderr prefixed with the earlier runs') and launch."""
        opts, n, out, err = self.options, 0, b"", b""
        multi_turn = type(h).follow_up is not HarnessAdapter.follow_up
        while True:
            left = ctx.timeout_s - (time.time() - t0)
            res = await sb.exec(
                list(launch.argv),
                timeout=max(left, 1.0),
                env=dict(launch.env),
                workdir=launch.workdir,
                max_output_bytes=opts.log_cap_bytes,
            )
            n += 1
            res = dataclasses.replace(res, stdout=out + res.stdout, stderr=err + res.stderr)
            if not multi_turn or res.timed_out or res.exit_code != 0:
                return res, launch
            logs = await _collect_logs(sb, launch.log_paths, opts.log_cap_bytes)
            stdout = res.stdout.decode("utf-8", errors="replace")
            turn = HarnessTurn(n, logs, stdout, endpoint=self.endpoint, run_id=self.run_id)
            nxt = await h.follow_up(ctx, turn)
            if nxt is None:
                return res, launch
            if time.time() - t0 >= ctx.timeout_s:  # no time left for the next run
                return dataclasses.replace(res, timed_out=True), launch
            try:
                await sb.put_files(dict(nxt.files))
            except SandboxError as exc:
                if not await sb.alive():
                    raise
                # the agent's files are in the way of the next turn's (e.g. the query file
                # made a directory, its tmpfs filled): its failure, scored, never an
                # infra-error that would leave the rollout out of its GRPO group
                raise _TurnRefusedError(
                    f"cannot write the next user turn into the sandbox: {exc}", res
                ) from exc
            launch, out, err = nxt, res.stdout, res.stderr

    async def _run_harness(
        self,
        spec: RolloutSpec,
        sb: Sandbox,
        session: SessionInfo | None,
        final: Path,
        timing: dict[str, float],
        built: bool = False,
    ) -> dict[str, Any]:
        """Launch, wait (timeout), collect logs and the final workspace (``built``: the
        sandbox runs the task's built image, which already ran its init scripts). Raises
        SandboxError on infrastructure failures."""
        task, h, opts = spec.task, spec.harness, self.options
        timeout = self.agent_timeout(task)
        timing["agent_timeout"] = timeout
        ctx = self._context(task, session, timeout)
        launch = h.launch(ctx)
        await sb.put_files({f"{HARNESS_LOG_DIR}/.keep": b"", **dict(launch.files)})
        layout = layout_of(task)  # the task's own setup and grading, if its layout has any
        setup = await layout.prepare(task, sb, built=built)
        if setup.error is not None:  # the task's own init / example failed: not the agent's
            return {**_refused(setup.error, None), "status": RolloutStatus.ENV_ERROR}
        t0 = time.time()
        host_logs: Mapping[str, str] = {}
        try:
            res, launch = await self._run_turns(h, ctx, sb, launch, t0)
        except _TurnRefusedError as exc:
            return _refused(exc.reason, exc.result)
        finally:
            host_logs = await h.end_rollout(ctx)
        timing["harness"] = time.time() - t0
        t1 = time.time()
        # The agent phase is over: no process it started may survive to touch what is read
        # (the task's own start sessions do). What it left running is named first: a
        # verifier on a snapshot of the container starts none of it.
        left: list[str] = []
        if task.verifier.verify_on_snapshot:
            left = await left_processes(sb)
        try:
            await kill_all_but(sb, setup.sessions)
        except SandboxError as exc:
            if not await sb.alive():
                raise
            return _refused(f"cannot stop the agent's processes: {exc}", res)
        logs = {**await _collect_logs(sb, launch.log_paths, opts.log_cap_bytes), **host_logs}
        graded = await layout.grade(task, sb, logs, setup)  # None: the verifier scores
        state = None  # the verifier sees the agent's whole container: its state, now
        if task.verifier.verify_on_snapshot:
            t_state = time.time()
            try:
                state = await agent_state(
                    task,
                    sb,
                    final.with_name("state.tar"),
                    ignore=(HARNESS_LOG_DIR, *h.mounts(task).values()),
                    max_bytes=self.copy_limits(task).max_bytes,
                )
            except SandboxCopyLimitError as exc:
                return _refused(f"the container's changed files are over the limits: {exc}", res)
            timing["snapshot"] = time.time() - t_state
        try:
            await sb.get_dir(task.workspace_path, final, limits=self.copy_limits(task))
        except SandboxCopyLimitError as exc:
            # The agent made its workspace too large / too many / too deep to read: its
            # failure, scored, never an infra-error that would leave it out of the scores.
            return _refused(f"workspace copy-out refused: {exc}", res)
        except FileNotFoundError as exc:
            # The workspace was there when the sandbox was made: the agent removed it, or
            # replaced it by a symlink (never followed). Its failure, scored.
            return _refused(f"workspace gone after the agent phase: {exc}", res)
        finally:
            timing["collect"] = time.time() - t1
        stdout = res.stdout.decode("utf-8", errors="replace")
        stderr = res.stderr.decode("utf-8", errors="replace")
        exit_code: int | None = None
        if res.timed_out:
            status, end, turns = RolloutStatus.TIMEOUT, "timeout", None
            reason = f"harness still running at {timeout:g} s"
        else:
            verdict = h.outcome(res.exit_code, logs, stdout)
            status = RolloutStatus.OK if verdict.ok else RolloutStatus.HARNESS_ERROR
            reason, end, turns = verdict.reason, verdict.end_reason, verdict.turns
            exit_code = res.exit_code
        return {
            "status": status,
            "reason": reason,
            "end_reason": end,
            "turns": turns,
            "exit_code": exit_code,
            "stdout": stdout,
            "stderr": stderr,
            "logs": logs,
            "graded": graded,
            "state": state,
            "left_processes": left,
            "outside_changes": []
            if state is None
            else _outside_changes(state, task.workspace_path),
        }


class _TurnRefusedError(Exception):
    """A follow-up turn that the agent's own files kept from starting (``reason``);
    ``result``: the last run's exec result."""

    def __init__(self, reason: str, result: ExecResult) -> None:
        super().__init__(reason)
        self.reason, self.result = reason, result


async def run_rollouts(
    tasks: Sequence[Task],
    harnesses: Sequence[HarnessAdapter | str],
    *,
    samples: int = 1,
    endpoint: ModelEndpoint | None = None,
    backend: InferenceBackend | None = None,
    model_dir: Path | str | None = None,
    options: RolloutOptions | None = None,
    **runner_options: Unpack[RunnerOptions],
) -> list[RolloutResult]:
    """Run tasks × harnesses × samples and return one :class:`RolloutResult` each.

    The model: an already-running proxy (``endpoint``), or a ``backend`` (any clawrl.proxy
    ``InferenceBackend``) served by an in-process proxy for the duration of the call, with
    ``model_dir`` (tokenizer + chat template). Neither is needed when every harness runs
    without a model (the oracle). ``options`` and ``runner_options`` (concurrency, run id,
    progress, session hook, verifier executor, sandbox image) are :class:`RolloutRunner`'s.

    Raises:
        ValueError: unknown harness name, ``samples`` < 1, or a model harness with neither
            ``endpoint`` nor ``backend`` + ``model_dir``.
    """
    specs = plan_rollouts(tasks, harnesses, samples)

    async def go(ep: ModelEndpoint | None) -> list[RolloutResult]:
        return await RolloutRunner(ep, options, **runner_options).run(specs)

    if endpoint is None and backend is not None:
        if model_dir is None:
            raise ValueError("a backend needs model_dir (tokenizer and chat template)")
        async with serve(backend, model_dir, tempdir=owned_tempdir) as ep:
            return await go(ep)
    return await go(endpoint)
