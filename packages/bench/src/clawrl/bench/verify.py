"""Workspace preparation, the oracle, and tamper-proof verification.

Verification never trusts the agent's workspace beyond its plain files:

1. the workspace is copied to a private scratch directory (the verifier may write freely
   without changing the rollout's workspace diff); symlinks that point outside the
   workspace are dropped from the copy, so an output cannot alias a trusted file, and
   FIFOs, sockets and device files are not copied; a workspace that cannot be copied
   (e.g. a path too long for the host) is a ``verifier-error``, never an exception;
2. a fresh copy of the task's trusted verifier files is placed at the verifier's mount
   path — any same-named path the agent created (a fake ``reward/`` directory, a modified
   ``check.py``) is deleted first; that copy is root's only (a private mount: directories
   0700, files 0600 or 0700, also where it lies inside the workspace copy), so agent code
   that the verifier runs unprivileged cannot read its expected answers or hidden data;
3. the verifier writes its reward into a *new* empty directory mounted at
   ``/logs/verifier`` that did not exist while the agent ran, or prints it on stdout
   (ClawGym), and the reward is read from there only — the sandbox executor's root
   supervisor takes it when the verifier's main process exits, after killing every other
   process of the verifier's sandbox (nothing the agent or the tests left running can
   rewrite it), and a verifier with a :attr:`~clawrl.bench.VerifierSpec.user` (ClawGym)
   runs unprivileged, its stdout a file of the supervisor's that no other process can
   reopen; built-in checkers run agent-written code as an unprivileged user that
   cannot write that directory nor the verifier's files, nor signal the checker;
4. the verifier's output must be whole: a reward directory that is no longer a directory,
   holds a link or a special file, or that the executor could not copy back whole (its
   limits, :attr:`~clawrl.bench.ExecResult.output_error`) is a ``verifier-error`` scored 0
   — the rollout's own files caused it, so it is never an ``infra-error``;
5. the verifier must exit 0: a verifier that exits non-zero or is killed is a
   ``verifier-error`` and one still running at its timeout a ``verifier-timeout``, whatever
   reward it wrote (code the verifier ran may have written a reward, then killed it) —
   except a plain failure status (1-125) that reports failed tests: pytest's exit 1 under
   Terminal-Bench 1 grading, or a Harbor ``test.sh`` that wrote reward 0 then ``exit $rc``,
   which are graded (a zero cannot be a tampering gain); a
   missing, unparsable, non-finite or out-of-range reward or sub-score is a
   ``verifier-error`` too — never a pass; a verdict is proven, never inferred: a reward
   below 1 is a ``verifier-error`` when something proves that the verifier could not do
   its work (a command its own script could not find, a pytest run through the trusted
   runner that ran no test, a test that could not reach its host, a declared network the
   run withheld: :func:`_proven`), and Terminal-Bench 1 is graded from the runner's JUnit
   reports (:mod:`clawrl.bench.verdict_reports`); signs read from the output
   (:mod:`clawrl.bench.verifier_diagnosis`) only add to a reason — except for verifiers
   without the trusted runner (ClawGym, built-in), where such a sign still voids a reward
   below 1;
6. a workspace entry that would stand in for the trusted runner's modules where the
   verifier's Python imports from (``pytest.py``, ``_pytest``, ``pluggy``,
   ``sitecustomize``, ``*.pth``; :attr:`VerifierSpec.trusted_runner
   <clawrl.bench.VerifierSpec>`) is tampering, a ``verifier-error``;
7. a verifier that sees the agent's whole container
   (:attr:`~clawrl.bench.VerifierSpec.verify_on_snapshot`) runs in a fresh sandbox with the
   agent's recorded state restored (:func:`agent_state`; nothing the agent left at the
   verifier's files or at the reward directory), its files a read-only bind mount; a state
   that adds, changes or deletes a program that sandbox runs by name
   (:data:`SUPERVISOR_PROGRAMS`) or ``/etc/ld.so.preload`` is tampering;
8. a verifier that executes workspace code (:attr:`Task.verifier_executes_workspace_code`)
   never runs on the host: :func:`verify` refuses a :class:`LocalExecutor` for it
   (:class:`~clawrl.bench.HostVerificationError`) unless that executor was built with
   ``trust_workspace_code=True``.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import shutil
from collections.abc import Iterable
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import Any

from clawrl.bench.errors import ExecutorError, HostVerificationError
from clawrl.bench.executors import (
    ExecResult,
    ExecSpec,
    Executor,
    LocalExecutor,
    Mount,
    make_private,
    make_readable,
)
from clawrl.bench.task import REWARD_MOUNT, Task
from clawrl.bench.tasks import layout_of
from clawrl.bench.verdict_reports import (
    TEST_UID,
    ctrf_tests,
    runner_outcome,
    shadowing_entries,
)
from clawrl.bench.verifier_diagnosis import cannot_run_reason, exit_reason
from clawrl.sandbox import (
    Sandbox,
    SandboxCopyLimitError,
    SandboxError,
    SandboxState,
    owned_tempdir,
    snapshot_state,
)
from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "STATE_PLACES",
    "SUPERVISOR_PROGRAMS",
    "VerifierResult",
    "VerifierStatus",
    "agent_state",
    "check_host_verification",
    "prepare_workspace",
    "run_solution",
    "verify",
    "verify_sandbox",
]

_TAIL = 4000


class VerifierStatus(StrEnum):
    """How a verification ended. Only ``ok`` carries a meaningful reward."""

    OK = "ok"
    ERROR = "verifier-error"  # exited non-zero, was killed, or its reward is missing/garbled
    TIMEOUT = "verifier-timeout"
    INFRA_ERROR = "infra-error"  # the executor could not run the verifier at all


class VerifierResult(BaseModel):
    """The score of one workspace.

    Attributes:
        reward: in [0, 1]; 0.0 whenever ``status`` is not ``ok``.
        subscores: named partial scores, each in [0, 1] (may be empty for a bare
            ``reward.txt``).
        subscores_note: what of a checker's JSON was not taken as a sub-score and why
            (ClawGym checkers, :func:`clawrl.bench.tasks.clawgym.checker_subscores`); ``""``: all.
        status: see :class:`VerifierStatus`.
        reason: why the status is not ``ok`` (empty when it is).
        exit_code: the verifier's exit status (``None`` if it did not finish).
        duration_s: wall-clock seconds the verifier ran.
        stdout / stderr: the last 4000 characters of the verifier's output.
    """

    model_config = ConfigDict(frozen=True)

    reward: float = Field(ge=0.0, le=1.0)
    subscores: dict[str, float] = Field(default_factory=dict)
    subscores_note: str = ""
    status: VerifierStatus
    reason: str = ""
    exit_code: int | None = None
    duration_s: float = 0.0
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        """True iff the verifier produced a valid reward."""
        return self.status is VerifierStatus.OK

    def passed(self, threshold: float = 1.0) -> bool:
        """True iff the verification is ``ok`` and ``reward >= threshold``."""
        return self.ok and self.reward >= threshold


def prepare_workspace(task: Task, dest: Path | str) -> Path:
    """Create the agent's initial workspace for ``task`` at host path ``dest``.

    ``dest`` must not exist or be an empty directory. Returns ``dest``.

    Raises:
        FileExistsError: ``dest`` exists and is not empty.
    """
    root = Path(dest)
    if root.exists() and any(root.iterdir()):
        raise FileExistsError(f"workspace {root} is not empty")
    root.mkdir(parents=True, exist_ok=True)
    for source in task.workspace_sources:
        target = (root / source.dest).resolve()
        if not target.is_relative_to(root.resolve()):
            raise ValueError(f"workspace source destination escapes the workspace: {source.dest}")
        if source.src.is_dir():
            shutil.copytree(source.src, target, symlinks=True, dirs_exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source.src, target)
    return root


def run_solution(task: Task, workspace: Path | str, executor: Executor | None = None) -> ExecResult:
    """Run the task's oracle (``solution/solve.sh``) in ``workspace`` (host path), in place.

    Uses the agent timeout. Raises ``ValueError`` if the task has no solution and
    :class:`ExecutorError` if the executor cannot start.
    """
    if task.solution is None:
        raise ValueError(f"task {task.id!r} has no solution")
    runner = executor or LocalExecutor()
    spec = ExecSpec(
        argv=task.solution.command,
        cwd=task.workspace_path,
        mounts=(
            Mount(Path(workspace).resolve(), task.workspace_path, read_only=False),
            Mount(task.solution.files_dir, task.solution.mount_path, read_only=True),
        ),
        env={"CLAWRL_WORKSPACE": task.workspace_path, **task.env},
        timeout_s=task.timeouts.agent_s,
    )
    return runner.run(spec)


def check_host_verification(tasks: Iterable[Task], executor: Executor | None) -> None:
    """Refuse to verify on the host any task whose verifier executes workspace code.

    ``executor`` counts as the host when it is a :class:`LocalExecutor` (``None``: the
    default of :func:`verify`, a ``LocalExecutor``) not built with
    ``trust_workspace_code=True``; any other executor is accepted. Call it before running
    rollouts (the rollout runner does), so that nothing runs before the refusal.

    Raises:
        HostVerificationError: some of ``tasks`` have
            :attr:`~clawrl.bench.Task.verifier_executes_workspace_code`; it names them.
    """
    runner = executor if executor is not None else LocalExecutor()
    if not isinstance(runner, LocalExecutor) or runner.trust_workspace_code:
        return
    bad = sorted({t.id for t in tasks if t.verifier_executes_workspace_code})
    if bad:
        raise HostVerificationError(bad)


def verify(
    task: Task,
    workspace: Path | str,
    executor: Executor | None = None,
    state: SandboxState | None = None,
) -> VerifierResult:
    """Score the finished ``workspace`` (host path) of ``task``; never raises for bad rewards.

    ``state``: the agent's container state outside the workspace
    (:attr:`VerifierSpec.verify_on_snapshot <clawrl.bench.VerifierSpec>`), restored by the
    executor into the verifier's fresh sandbox before the workspace copy is put on top; an
    executor that cannot (a :class:`LocalExecutor`) is an ``infra-error``.

    See the module docstring for the tamper-proofing steps. The original workspace is
    not modified. A workspace that cannot be copied (any ``OSError``, e.g. "file name too
    long") is a ``verifier-error`` result with the reason.

    Raises:
        FileNotFoundError: ``workspace`` is not a directory.
        HostVerificationError: ``executor`` is the host (see
            :func:`check_host_verification`) and the task's verifier executes workspace code.
    """
    source = Path(workspace)
    if not source.is_dir():
        raise FileNotFoundError(f"workspace {source} is not a directory")
    runner = executor or LocalExecutor()
    check_host_verification([task], runner)
    with owned_tempdir("clawrl-verify-") as scratch_name:
        scratch = Path(scratch_name)
        # traversable (not readable) by the unprivileged user a host-run checker hands the
        # workspace copy to; the reward directory inside stays writable by its owner only
        scratch.chmod(0o711)
        try:
            ws, trusted = _stage(task, source, scratch)
        except OSError as exc:
            return VerifierResult(
                reward=0.0,
                status=VerifierStatus.ERROR,
                reason=f"cannot copy the workspace for verification: {type(exc).__name__}: "
                f"{str(exc)[:500]}",
            )
        tamper = _shadowing(task, ws) or (_planted(state) if state is not None else None)
        if tamper is not None:
            return tamper
        reward_dir = scratch / "reward"
        reward_dir.mkdir(mode=0o755)
        env = dict(task.verifier.env)
        if task.verifier.trusted_runner and not isinstance(runner, LocalExecutor):
            # in a sandbox, the runner starts pytest as this unprivileged user and hands
            # it the workspace (on the host, trusted code runs as the caller)
            env["CLAWRL_TEST_UID"] = str(TEST_UID)
            env["CLAWRL_WORKSPACE"] = task.workspace_path
        spec = ExecSpec(
            argv=task.verifier.command,
            cwd=task.workspace_path,
            mounts=(
                Mount(ws, task.workspace_path, read_only=False, persist=False),
                # pytest, run unprivileged by the trusted runner, reads the tests: root's
                # to write, everyone's to read (agent code ran as root there before)
                Mount(
                    trusted,
                    task.verifier.mount_path,
                    read_only=True,
                    private=not task.verifier.trusted_runner,
                ),
                Mount(reward_dir, REWARD_MOUNT, read_only=False),
            ),
            env=env,
            timeout_s=task.timeouts.verifier_s,
            user=task.verifier.user,
            state=state,
        )
        try:
            result = runner.run(spec)
        except ExecutorError as exc:
            return VerifierResult(
                reward=0.0, status=VerifierStatus.INFRA_ERROR, reason=f"executor: {exc}"
            )
        if result.timed_out:
            return _failure(
                result,
                VerifierStatus.TIMEOUT,
                f"verifier exceeded {task.timeouts.verifier_s:g} s",
            )
        problem = result.output_error or _reward_dir_problem(reward_dir)
        if problem:
            return _failure(
                result,
                VerifierStatus.ERROR,
                f"the verifier's output is not whole: {problem}; no reward is trusted",
            )
        cause = cannot_run_reason(result.stdout, result.stderr, task.verifier.mount_path)
        if result.exit_code != 0 and not _failed_tests_exit(task, result, reward_dir):
            why = f" ({cause})" if cause else ""
            return _failure(
                result,
                VerifierStatus.ERROR,
                f"verifier {exit_reason(result.exit_code)}{why}; its reward is not trusted",
            )
        if task.verifier.reward_channel == "stdout":
            verdict = _from_stdout(task, result, reward_dir)
        elif task.verifier.reward_channel == "pytest":
            verdict = _from_pytest(result, reward_dir)
        else:
            verdict = _from_reward_dir(result, reward_dir)
        return _proven(task, verdict, result, reward_dir, cause)


#: Exit statuses that never mean "tests ran": pytest's 2-5 (interrupted, internal error,
#: usage error, no tests collected), 126 (not executable) and 127 (command not found).
_NOT_RAN = frozenset({2, 3, 4, 5, 126, 127})


def _failed_tests_exit(task: Task, result: ExecResult, reward_dir: Path) -> bool:
    """Whether a non-zero exit is the verifier reporting failed tests, to be graded anyway:
    pytest's exit 1 under Terminal-Bench 1 (the runner's reports then decide), or a Harbor
    ``test.sh`` that wrote reward 0 and then ``exit $rc`` with a plain status (1-125 but
    not pytest's 2-5, which mean that no test ran). A zero cannot be a tampering gain; any
    other reward from a non-zero exit stays untrusted."""
    code = result.exit_code
    if code is None or not 1 <= code <= 125 or code in _NOT_RAN:
        return False
    if task.verifier.reward_channel == "pytest":
        return code == 1
    if task.verifier.reward_channel != "file":
        return False
    verdict = _from_reward_dir(result, reward_dir)
    return verdict.ok and verdict.reward == 0.0


def _shadowing(task: Task, ws: Path) -> VerifierResult | None:
    """Tampering: a workspace entry where the verifier's interpreter imports from (its
    working directory) that would stand in for the trusted runner's modules."""
    if not task.verifier.trusted_runner or _relative_to(
        PurePosixPath(task.verifier.mount_path), task.workspace_path
    ):
        return None
    found = shadowing_entries(ws)
    if not found:
        return None
    return VerifierResult(
        reward=0.0,
        status=VerifierStatus.ERROR,
        reason="tampering: the workspace holds "
        + ", ".join(repr(name) for name in found[:5])
        + ", which would stand in for the test runner's modules where the verifier's "
        "Python imports from",
    )


#: Programs the verifier's sandbox runs by name before and around the verifier's command
#: (the root supervisor: ``sh``, ``tar``, ``mkdir``, ``setpriv``, ``kill``, ``tail``,
#: ``sleep``) and that run every Harbor / Terminal-Bench script (``bash``, ``env``).
SUPERVISOR_PROGRAMS = frozenset(
    {"sh", "dash", "bash", "tar", "mkdir", "setpriv", "kill", "tail", "sleep", "env", "rm"}
)
#: The directories a sandbox's ``PATH`` searches.
_PATH_DIRS = frozenset(
    {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}
)
#: Files that make every program of the sandbox load code of the agent's.
_LOADER_FILES = frozenset({"/etc/ld.so.preload"})


#: Python packages of the trusted runner: the agent's own copy would run as the verifier.
_RUNNER_PACKAGES = ("pytest", "_pytest", "py.py", "pluggy", "iniconfig", "exceptiongroup")
_PYTHON_NAME = re.compile(r"python[0-9.]*(?:-config)?|pytest|py\.test")
_SITE_DIRS = frozenset({"site-packages", "dist-packages"})


#: Parts of the standard library that Debian and Ubuntu ship as packages of their own
#: (``python3-venv``, ``python3-tk``, ...): an agent may install them.
_STDLIB_PACKAGES = frozenset(
    {"ensurepip", "venv", "distutils", "tkinter", "lib2to3", "idlelib", "turtledemo", "test"}
)


def _python_planted(kind: str, p: PurePosixPath) -> bool:
    """Whether ``p`` (``kind``: ``A`` added, ``C`` changed, ``D`` deleted by the agent's
    container) is part of the Python the trusted runner starts as root: an interpreter or
    ``pytest`` script in a ``PATH`` directory; a ``*.pth``, ``sitecustomize`` or
    ``usercustomize`` anywhere in a Python library tree; the runner's packages (pytest,
    pluggy and theirs) in one; or a changed or deleted file of the standard library (a
    ``lib/python3*`` tree outside its site directories; added files too, except under
    ``lib-dynload`` and the parts distributions package apart). Bytecode caches are never
    restored into the verifier's sandbox (:func:`~clawrl.sandbox.snapshot_state`)."""
    if str(p.parent) in _PATH_DIRS and _PYTHON_NAME.fullmatch(p.name):
        return True
    parts = p.parts
    lib = next((i for i, part in enumerate(parts) if part.startswith("python3")), None)
    if lib is None or lib == 0 or parts[lib - 1] != "lib" or len(parts) <= lib + 1:
        return False
    if "__pycache__" in parts or p.suffix == ".pyc":
        return False
    if p.suffix == ".pth" or p.stem in ("sitecustomize", "usercustomize"):
        return True
    site = next((i for i in range(lib + 1, len(parts)) if parts[i] in _SITE_DIRS), None)
    if site is not None:
        return len(parts) > site + 1 and parts[site + 1].startswith(_RUNNER_PACKAGES)
    top = parts[lib + 1]
    name = parts[lib + 2] if top == "lib-dynload" and len(parts) > lib + 2 else top
    if name.startswith(_RUNNER_PACKAGES):
        return True
    packaged_apart = top == "lib-dynload" or top.split(".")[0] in _STDLIB_PACKAGES
    return not (kind == "A" and packaged_apart)


def _planted(state: SandboxState) -> VerifierResult | None:
    """Tampering: the agent's container state adds, changes or deletes a program the
    verifier's sandbox runs by name (:data:`SUPERVISOR_PROGRAMS`, in any ``PATH``
    directory, so a new ``/usr/local/bin/bash`` counts), a ``PATH`` directory itself (its
    mode or owner), ``/etc/ld.so.preload``, or a part
    of the Python the trusted pytest runner starts (:func:`_python_planted`)."""
    found = []
    for kind, path in state.changes:
        p = PurePosixPath(path)
        if (
            str(p) in _LOADER_FILES
            or (str(p.parent) in _PATH_DIRS and p.name in SUPERVISOR_PROGRAMS)
            or str(p) in _PATH_DIRS  # a PATH directory's mode or owner: others may plant
            or _python_planted(kind, p)
        ):
            found.append(path)
    if not found:
        return None
    return VerifierResult(
        reward=0.0,
        status=VerifierStatus.ERROR,
        reason="tampering: the agent's container changes "
        + ", ".join(repr(name) for name in found[:5])
        + ", which the verifier's sandbox runs or loads",
    )


def _proven(
    task: Task, verdict: VerifierResult, result: ExecResult, reward_dir: Path, cause: str | None
) -> VerifierResult:
    """A verdict below full marks is kept only when nothing proves that the verifier could
    not do its work: a network the run withheld from a task that declares one, a command
    its own script could not find, a pytest run through the trusted runner that ran no
    test, a CTRF report without an executed test. Such a verdict becomes a
    ``verifier-error`` naming the cause. ``cause`` (read from the output by
    :func:`~clawrl.bench.verifier_diagnosis.cannot_run_reason`) only adds to a reason; it
    never decides."""
    hint = f" (the output says: {cause})" if cause else ""
    if not verdict.ok:
        return verdict.model_copy(update={"reason": f"{verdict.reason}{hint}"})
    outcome = runner_outcome(reward_dir) if task.verifier.trusted_runner else None
    tampered = [p for p in outcome.problems if p.startswith("tampering:")] if outcome else []
    if tampered:  # whatever the reward: the tested code changed how pytest reports
        return _failure(result, VerifierStatus.ERROR, "; ".join(tampered[:2]))
    if verdict.reward >= 1.0:
        return verdict
    proofs: list[str] = []
    if task.network_withheld:
        proofs.append("the task declares a network, which this run withheld")
    if outcome is not None and task.verifier.reward_channel != "pytest":
        reason = outcome.reason()
        if reason is not None and (outcome.runs or outcome.missing_commands):
            proofs.append(reason)
    elif outcome is None and cause is not None:
        # verifiers without the trusted runner (ClawGym, built-in): the output's sign is
        # all there is; it still turns a zero into an error, never into a pass
        proofs.append(cause)
        hint = ""
    ctrf = reward_dir / "ctrf.json"
    if ctrf.exists():
        try:
            if not ctrf_tests(ctrf):
                proofs.append("its CTRF report lists no executed test")
        except ValueError as exc:
            proofs.append(str(exc))
    if not proofs:
        return verdict
    return _failure(
        result,
        VerifierStatus.ERROR,
        f"the verifier could not do its work: {'; '.join(proofs)}; its reward "
        f"{verdict.reward:g} is not trusted{hint}",
    )


def _stage(task: Task, source: Path, scratch: Path) -> tuple[Path, Path]:
    """Copy the workspace and the trusted verifier files into ``scratch``; returns their
    host paths. Raises ``OSError`` (``shutil.Error`` included) when a copy fails."""
    ws = scratch / "workspace"
    shutil.copytree(source, ws, symlinks=True, ignore=_special_files)
    _drop_escaping_symlinks(ws, PurePosixPath(task.workspace_path))
    trusted = scratch / "trusted"
    rel_in_ws = _relative_to(PurePosixPath(task.verifier.mount_path), task.workspace_path)
    if rel_in_ws is not None:
        # ClawGym: the verifier lives inside the workspace; replace whatever the agent left.
        trusted = ws / rel_in_ws
        _remove(trusted)
    shutil.copytree(task.verifier.files_dir, trusted, symlinks=False)
    if task.verifier.trusted_runner:
        # pytest runs unprivileged and reads the tests: root's to write, everyone's to read
        # (the modes a bind mount of a verifier on a snapshot keeps as they are here)
        make_readable(trusted)
    else:
        make_private(trusted)
    return ws, trusted


async def verify_sandbox(
    task: Task, sandbox: Sandbox, executor: Executor | None = None
) -> VerifierResult:
    """Score the workspace of a live agent sandbox.

    Kills every process of ``sandbox`` (:meth:`~clawrl.sandbox.Sandbox.kill_all`), copies
    ``task.workspace_path`` out of it (and, for a verifier that verifies on a snapshot,
    records the sandbox's state: :func:`agent_state`), then runs :func:`verify` on the copy in a worker
    thread with ``executor`` (default: a fresh :class:`~clawrl.bench.SandboxExecutor`
    sandbox per verification). A workspace over the copy limits is a ``verifier-error``
    (the agent made it so); one that cannot be copied out for another reason an
    ``infra-error``.

    Raises:
        HostVerificationError: see :func:`verify`.
    """
    from clawrl.bench.sandbox_executor import SandboxExecutor

    runner = executor or SandboxExecutor()
    check_host_verification([task], runner)
    with owned_tempdir("clawrl-agentws-") as tmp:
        dest = Path(tmp) / "workspace"
        try:
            await sandbox.kill_all()
            await sandbox.get_dir(task.workspace_path, dest)
        except SandboxCopyLimitError as exc:
            return VerifierResult(
                reward=0.0,
                status=VerifierStatus.ERROR,
                reason=f"the workspace is over the copy-out limits: {exc}",
            )
        except FileNotFoundError as exc:  # the agent removed it or made it a symlink
            return VerifierResult(
                reward=0.0,
                status=VerifierStatus.ERROR,
                reason=f"the workspace is gone: {exc}",
            )
        except SandboxError as exc:
            return VerifierResult(
                reward=0.0,
                status=VerifierStatus.INFRA_ERROR,
                reason=f"cannot copy the workspace out of the sandbox: {exc}",
            )
        state = None
        if task.verifier.verify_on_snapshot:
            try:
                state = await agent_state(task, sandbox, Path(tmp) / "state.tar")
            except SandboxCopyLimitError as exc:
                return VerifierResult(
                    reward=0.0,
                    status=VerifierStatus.ERROR,
                    reason=f"the container's changed files are over the limits: {exc}",
                )
            except SandboxError as exc:
                return VerifierResult(
                    reward=0.0,
                    status=VerifierStatus.INFRA_ERROR,
                    reason=f"cannot snapshot the agent's container: {exc}",
                )
        return await asyncio.to_thread(verify, task, dest, runner, state)


#: Tmpfs places of an agent sandbox whose contents belong to its container state (its
#: ``/run`` and ``/dev/shm`` hold clawrl's own files and are left out).
STATE_PLACES = ("/tmp", "/var/tmp", "/root", "/home/sandbox")


async def agent_state(
    task: Task,
    sandbox: Sandbox,
    archive: Path,
    ignore: Iterable[str] = (),
    max_bytes: int = 1 << 30,
) -> SandboxState:
    """The state of the agent's ``sandbox`` (every process of it already dead) that its
    verifier sees (:func:`~clawrl.sandbox.snapshot_state`): its root's changes and the
    contents of :data:`STATE_PLACES`. Nothing at the verifier's own paths (its files,
    :data:`~clawrl.bench.REWARD_MOUNT`) is restored — what the agent planted there is only
    listed — and ``ignore`` (the harness's own files) is neither restored nor listed.

    Raises:
        SandboxCopyLimitError: the changed files hold more than ``max_bytes``, or more
            entries or levels than :func:`~clawrl.sandbox.snapshot_state` walks.
        SandboxError: the sandbox's changes cannot be read.
    """
    return await snapshot_state(
        sandbox,
        archive,
        places=STATE_PLACES,
        exclude=(task.verifier.mount_path, REWARD_MOUNT),
        ignore=tuple(ignore),
        max_bytes=max_bytes,
    )


# --------------------------------------------------------------------- internals


def _relative_to(path: PurePosixPath, root: str) -> PurePosixPath | None:
    base = PurePosixPath(root)
    if path != base and base in path.parents:
        return path.relative_to(base)
    return None


def _special_files(directory: str, names: list[str]) -> set[str]:
    """Names that are neither directories, regular files nor symlinks (FIFOs, sockets,
    devices): never copied — shutil refuses named pipes, and an agent must not be able to
    break verification by leaving one."""
    skip = set()
    for name in names:
        path = Path(directory) / name
        if not (path.is_symlink() or path.is_dir() or path.is_file()):
            skip.add(name)
    return skip


def _reward_dir_problem(reward_dir: Path) -> str:
    """Why the reward directory cannot be read as the verifier left it: it is no longer a
    directory, or it holds a link or a special file (``reward.txt`` made a link to
    ``/dev/null`` beside a ``reward.json`` of 1 must not leave the JSON's word alone);
    ``""``: it holds only directories and regular files."""
    if reward_dir.is_symlink() or not reward_dir.is_dir():
        return f"{REWARD_MOUNT} is no longer a directory"
    for dirpath, dirnames, filenames in os.walk(reward_dir):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            if path.is_symlink() or not (path.is_dir() or path.is_file()):
                rel = path.relative_to(reward_dir).as_posix()
                shown = os.fsencode(rel).decode("utf-8", "backslashreplace")
                return f"{REWARD_MOUNT} holds a link or special file: {shown!r}"
    return ""


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _drop_escaping_symlinks(ws: Path, ws_path: PurePosixPath) -> None:
    """Delete symlinks whose target (read as an in-sandbox path) leaves the workspace."""
    for dirpath, dirnames, filenames in os.walk(ws):
        for name in [*dirnames, *filenames]:
            link = Path(dirpath) / name
            if not link.is_symlink():
                continue
            target = PurePosixPath(os.readlink(link))
            inside = ws_path / link.parent.relative_to(ws).as_posix()
            resolved = _normpath(target if target.is_absolute() else inside / target)
            if resolved != ws_path and ws_path not in resolved.parents:
                link.unlink()


def _normpath(path: PurePosixPath) -> PurePosixPath:
    return PurePosixPath(os.path.normpath(str(path)))


def _failure(result: ExecResult, status: VerifierStatus, reason: str) -> VerifierResult:
    return VerifierResult(
        reward=0.0,
        status=status,
        reason=reason,
        exit_code=result.exit_code,
        duration_s=result.duration_s,
        stdout=result.stdout[-_TAIL:],
        stderr=result.stderr[-_TAIL:],
    )


def _score(value: Any, what: str) -> float:
    """A finite number in [0, 1], else ``ValueError`` with the reason."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{what} is not a number: {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{what} is not a number: {str(value)[:80]!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{what} is not finite: {number}")
    if not 0.0 <= number <= 1.0:
        raise ValueError(f"{what} is outside [0, 1]: {number}")
    return number


def _subscores(obj: dict[str, Any]) -> dict[str, float]:
    return {str(k): _score(v, f"sub-score {k!r}") for k, v in obj.items()}


def _ok(result: ExecResult, reward: float, subscores: dict[str, float]) -> VerifierResult:
    return VerifierResult(
        reward=reward,
        subscores=subscores,
        status=VerifierStatus.OK,
        exit_code=result.exit_code,
        duration_s=result.duration_s,
        stdout=result.stdout[-_TAIL:],
        stderr=result.stderr[-_TAIL:],
    )


def _lenient_subscores(path: Path) -> dict[str, float]:
    """Sub-scores from a free-form reward.json next to a reward.txt: the entries that are
    scores in [0, 1] (other entries are metadata, e.g. test counts); {} if unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError, UnicodeDecodeError):
        return {}
    if not isinstance(data, dict):
        return {}
    subs: dict[str, float] = {}
    for key, value in data.items():
        if key == "reward":
            continue
        try:
            subs[str(key)] = _score(value, key)
        except ValueError:
            continue
    return subs


def _from_reward_dir(result: ExecResult, reward_dir: Path) -> VerifierResult:
    """Harbor's rule: ``reward.txt`` (one number) is the reward when present — a
    ``reward.json`` beside it only adds the sub-scores it holds; otherwise ``reward.json``
    must be an object with a ``reward`` entry or only sub-scores (reward = their mean)."""
    json_path, txt_path = reward_dir / "reward.json", reward_dir / "reward.txt"
    has_json = json_path.is_file() and not json_path.is_symlink()
    try:
        if txt_path.is_file() and not txt_path.is_symlink():
            reward = _score(txt_path.read_text(encoding="utf-8").strip(), "reward")
            return _ok(result, reward, _lenient_subscores(json_path) if has_json else {})
        if has_json:
            data = json.loads(json_path.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or not data:
                raise ValueError("reward.json is not a non-empty JSON object")
            if "reward" in data:
                reward = _score(data["reward"], "reward")
                subs = _subscores({k: v for k, v in data.items() if k != "reward"})
            else:
                subs = _subscores(data)
                reward = sum(subs.values()) / len(subs)
            return _ok(result, min(1.0, reward), subs)
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        return _failure(result, VerifierStatus.ERROR, f"bad reward: {exc}")
    return _failure(
        result,
        VerifierStatus.ERROR,
        f"verifier wrote no reward.json or reward.txt (exit code {result.exit_code})",
    )


def _from_pytest(result: ExecResult, reward_dir: Path) -> VerifierResult:
    """Terminal-Bench 1: the reward from the JUnit XML reports of the pytest runs that went
    through the trusted runner (:func:`~clawrl.bench.verdict_reports.runner_outcome`):
    1 iff every executed test passed; no report, a run that exited otherwise than 0 or 1,
    or no executed test is a ``verifier-error`` with the reason. Nothing is read from the
    output, which the tested code can print into."""
    outcome = runner_outcome(reward_dir)
    reason = outcome.reason()
    if reason is not None:
        return _failure(result, VerifierStatus.ERROR, f"no proven verdict: {reason}")
    return _ok(result, outcome.reward, dict(outcome.tests))


def _from_stdout(task: Task, result: ExecResult, reward_dir: Path) -> VerifierResult:
    """ClawGym: the last stdout line is the reward; the sub-scores come from the checker's
    JSON in ``subscores_file`` when it was written, else from the last JSON document printed
    before the reward, mapped by the task's layout (:meth:`TaskLayout.subscores
    <clawrl.bench.tasks.TaskLayout.subscores>`)."""
    subscores_file = task.verifier.subscores_file
    lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    if not lines:
        return _failure(
            result, VerifierStatus.ERROR, f"verifier printed nothing (exit code {result.exit_code})"
        )
    try:
        reward = _score(lines[-1], "reward (last stdout line)")
    except ValueError as exc:
        return _failure(result, VerifierStatus.ERROR, f"bad reward: {exc}")
    path = reward_dir / subscores_file if subscores_file else None
    if path is not None and path.is_file() and not path.is_symlink():
        source, text = subscores_file, path.read_text(encoding="utf-8", errors="replace")
    else:
        source, text = "stdout", result.stdout.rstrip().rpartition("\n")[0]
    subs: dict[str, float] = {}
    notes: list[str] = []
    if text.strip():
        try:
            subs, notes = layout_of(task).subscores(text)
        except ValueError as exc:
            notes = [f"{source}: {exc}"]
    note = "; ".join(notes[:5]) + (f"; and {len(notes) - 5} more" if len(notes) > 5 else "")
    return _ok(result, reward, subs).model_copy(update={"subscores_note": note})
