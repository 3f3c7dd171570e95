"""Harness adapters: how a black-box agent harness is installed, launched and judged.

One interface, :class:`HarnessAdapter`, for every harness the rollout runner drives. An
adapter never runs anything itself; it *describes* the run and the runner executes it:

1. :meth:`~HarnessAdapter.prepare` (host side, once per process): install or locate the
   harness runtime (a cached virtual environment, an npm prefix) — install-once, cached;
2. :meth:`~HarnessAdapter.mounts` (per task): host paths mounted **read-only** into the
   sandbox at creation (the runtime, at the same path it was built for; the oracle's
   solution files), and whether the sandbox needs the model socket (:attr:`needs_model`);
3. :meth:`~HarnessAdapter.launch` (per rollout): a :class:`HarnessLaunch` — files written
   into the sandbox before the start (config files), argv, environment, working directory,
   the in-sandbox log paths to collect afterwards;
4. :meth:`~HarnessAdapter.outcome`: after the process ended (the runner enforces the
   timeout), decide from its exit status and its own logs whether it ended by itself / at
   its turn limit (``ok``) or failed (``harness-error``), with an end reason.

The :class:`HarnessContext` gives an adapter the rollout's session in every wire format a
harness may speak — OpenAI Chat Completions and Responses (``openai_base_url``) and
Anthropic Messages (``anthropic_base_url``, without ``/v1``: Anthropic clients append it) —
already rewritten to the in-sandbox forwarder address, plus the session key, the model name,
the turn and token caps and the task. Adapters for OpenClaw, Claude Code, Codex and pi
(issue 8) fit the same four steps: an npm prefix from ``prepare`` mounted read-only, a config
file (``openclaw.json5``, ``~/.pi/agent/models.json``, ``CODEX_HOME``) in
:attr:`HarnessLaunch.files`, API-specific env vars, exit-code conventions in ``outcome``.

Built in: :class:`ReferenceHarness` (our stdlib-only agent loop run by the sandbox's own
``/usr/bin/python3``), :class:`MiniSweAgentHarness` (mini-swe-agent in tool-calling mode from
a virtual environment built on ``/usr/bin/python3``) and :class:`OracleHarness` (the task's
solution; no model). :func:`get_harness` builds one by name.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from clawrl.bench.errors import BenchError
from clawrl.bench.task import Task

__all__ = [
    "HARNESS_LOG_DIR",
    "HarnessAdapter",
    "HarnessContext",
    "HarnessInstallError",
    "HarnessLaunch",
    "HarnessOutcome",
    "MiniSweAgentHarness",
    "OracleHarness",
    "ReferenceHarness",
    "get_harness",
    "harness_cache_dir",
    "harness_names",
    "reference_agent_path",
]

#: In-sandbox directory where adapters make their harness write its own logs.
HARNESS_LOG_DIR = "/tmp/clawrl-harness"
#: Where the reference agent program is mounted (read-only) inside the sandbox.
REFERENCE_AGENT_MOUNT = "/run/clawrl/harness/reference_agent.py"

ProgressFn = Callable[[str], None]
WireAPI = Literal["openai.chat", "anthropic.messages", "openai.responses"]


class HarnessInstallError(BenchError):
    """A harness runtime could not be installed or found (an infrastructure failure)."""


@dataclass(frozen=True)
class HarnessContext:
    """What an adapter knows about one rollout when it builds the launch.

    Attributes:
        task: the task (instruction, in-sandbox ``workspace_path``, timeouts).
        session_id: the proxy session of this rollout (``""`` for harnesses without a model).
        api_key: the session's key (the only credential a sandbox sees).
        openai_base_url: ``http://127.0.0.1:<port>/s/<id>/v1`` — Chat Completions and
            Responses clients, through the in-sandbox forwarder.
        anthropic_base_url: ``http://127.0.0.1:<port>/s/<id>`` — Anthropic clients append
            ``/v1/messages`` themselves.
        model: model name the harness sends (the proxy serves whatever it is asked for).
        max_turns: the harness's own turn / step limit.
        max_tokens: per-call output cap the harness requests (``None``: the harness's default,
            clamped by the proxy).
        timeout_s: wall-clock seconds the runner allows the harness process.
        log_dir: in-sandbox directory for the harness's own logs (:data:`HARNESS_LOG_DIR`).
    """

    task: Task
    session_id: str = ""
    api_key: str = ""
    openai_base_url: str = ""
    anthropic_base_url: str = ""
    model: str = "policy"
    max_turns: int = 20
    max_tokens: int | None = None
    timeout_s: float = 600.0
    log_dir: str = HARNESS_LOG_DIR


@dataclass(frozen=True)
class HarnessLaunch:
    """How to start the harness process inside the sandbox.

    Attributes:
        argv: the command (in-sandbox paths).
        env: environment variables for the process (on top of the sandbox's own).
        workdir: working directory (the task's workspace).
        files: in-sandbox path -> content written before the start (config files, the task
            text); host ``Path`` values are copied (file or directory).
        log_paths: in-sandbox files or directories collected after the run, by name.
    """

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    workdir: str = "/workspace"
    files: Mapping[str, bytes | str | Path] = field(default_factory=dict)
    log_paths: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HarnessOutcome:
    """The adapter's verdict on a finished (not timed-out) harness process.

    Attributes:
        ok: the harness ended by itself or at its turn limit.
        end_reason: e.g. ``final_answer``, ``turn_limit``, ``submitted``, ``model_error``,
            ``exit_code_1``.
        reason: why it is not ``ok`` (empty when it is).
        turns: model turns the harness reports (``None`` if unknown).
    """

    ok: bool
    end_reason: str
    reason: str = ""
    turns: int | None = None


class HarnessAdapter(ABC):
    """Base class of harness adapters (see the module docstring for the protocol).

    Attributes:
        name: registry name (``reference``, ``mini-swe-agent``, ``oracle``, ...).
        api: the wire API the harness speaks (``None`` for harnesses without a model).
        needs_model: whether the sandbox needs the model socket + forwarder.
    """

    name: str = ""
    api: WireAPI | None = "openai.chat"
    needs_model: bool = True

    def prepare(self, progress: ProgressFn | None = None) -> None:  # noqa: B027
        """Install or locate the runtime on the host (idempotent, cached; may take minutes
        the first time, reporting lines to ``progress``).

        Raises:
            HarnessInstallError: the runtime cannot be installed.
        """

    def mounts(self, task: Task) -> dict[str, str]:
        """Host path -> in-sandbox path, mounted read-only when the sandbox is created."""
        return {}

    @abstractmethod
    def launch(self, ctx: HarnessContext) -> HarnessLaunch:
        """The process to start for one rollout."""

    def outcome(self, exit_code: int, logs: Mapping[str, str], stdout: str) -> HarnessOutcome:
        """Judge a finished process (default: exit 0 = ok)."""
        if exit_code == 0:
            return HarnessOutcome(ok=True, end_reason="exited")
        return HarnessOutcome(
            ok=False, end_reason=f"exit_code_{exit_code}", reason=f"exit code {exit_code}"
        )

    def describe(self) -> dict[str, Any]:
        """JSON-able description saved with results (name, version, options)."""
        return {"name": self.name, "api": self.api}


# --------------------------------------------------------------------------- reference


def reference_agent_path() -> Path:
    """Host path of the reference harness program (package data)."""
    return Path(str(resources.files("clawrl.bench") / "harness_programs" / "reference_agent.py"))


class ReferenceHarness(HarnessAdapter):
    """clawrl's reference harness: ``reference_agent.py`` run by the sandbox's ``python3``.

    A stdlib-only program (no virtual environment), mounted read-only at
    ``/run/clawrl/harness/reference_agent.py``; OpenAI Chat Completions, non-streamed; tools
    ``bash``, ``read_file``, ``write_file``, ``edit_file``. Exit 0 = final answer or turn
    limit, 2 = the model endpoint failed; its transcript (every message and tool execution)
    is collected as the log ``transcript``.

    Args:
        python: the in-sandbox interpreter (Debian's ``/usr/bin/python3``).
        bash_timeout_s: per-``bash``-call timeout inside the harness.
        request_timeout_s: per-model-call HTTP timeout.
    """

    name = "reference"
    api: WireAPI | None = "openai.chat"

    def __init__(
        self,
        python: str = "/usr/bin/python3",
        bash_timeout_s: float = 60.0,
        request_timeout_s: float = 600.0,
    ) -> None:
        self.python = python
        self.bash_timeout_s = bash_timeout_s
        self.request_timeout_s = request_timeout_s

    def mounts(self, task: Task) -> dict[str, str]:
        return {str(reference_agent_path()): REFERENCE_AGENT_MOUNT}

    def launch(self, ctx: HarnessContext) -> HarnessLaunch:
        task_file = f"{ctx.log_dir}/task.md"
        argv = [
            self.python,
            REFERENCE_AGENT_MOUNT,
            "--base-url",
            ctx.openai_base_url,
            "--model",
            ctx.model,
            "--task-file",
            task_file,
            "--workdir",
            ctx.task.workspace_path,
            "--max-turns",
            str(ctx.max_turns),
            "--bash-timeout",
            f"{self.bash_timeout_s:g}",
            "--request-timeout",
            f"{self.request_timeout_s:g}",
            "--transcript",
            f"{ctx.log_dir}/transcript.json",
        ]
        if ctx.max_tokens:
            argv += ["--max-tokens", str(ctx.max_tokens)]
        return HarnessLaunch(
            argv=tuple(argv),
            env={"OPENAI_API_KEY": ctx.api_key},
            workdir=ctx.task.workspace_path,
            files={task_file: ctx.task.instruction},
            log_paths={"transcript": f"{ctx.log_dir}/transcript.json"},
        )

    def outcome(self, exit_code: int, logs: Mapping[str, str], stdout: str) -> HarnessOutcome:
        transcript = _json_or_empty(logs.get("transcript", ""))
        end = str(transcript.get("end_reason") or "")
        turns = transcript.get("turns")
        turns = turns if isinstance(turns, int) else None
        if exit_code == 0 and end in {"final_answer", "turn_limit"}:
            return HarnessOutcome(ok=True, end_reason=end, turns=turns)
        if exit_code == 2:
            err = str(transcript.get("error") or "model endpoint failed")
            return HarnessOutcome(ok=False, end_reason="model_error", reason=err, turns=turns)
        return HarnessOutcome(
            ok=False,
            end_reason=end or f"exit_code_{exit_code}",
            reason=f"exit code {exit_code}" + (f" ({end})" if end else ""),
            turns=turns,
        )

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "python": self.python, "bash_timeout_s": self.bash_timeout_s}


# ------------------------------------------------------------------------ installers


def run_streamed(
    argv: list[str],
    say: ProgressFn,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    tail_lines: int = 20,
) -> tuple[int, list[str]]:
    """Run an installer command to its end, passing each non-empty line of its combined
    stdout/stderr to ``say``; returns its exit status and its last ``tail_lines`` lines.

    The pipe is always closed and the process always reaped (a ``with`` block: an unclosed
    pipe is a ``ResourceWarning``, an error under the tests' ``filterwarnings=error``); if
    reading is interrupted (``say`` raising, ``KeyboardInterrupt``), the process is killed
    first, so it can never be left running or block on a full pipe.

    Raises:
        HarnessInstallError: the command cannot be started.
    """
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
    except OSError as exc:
        raise HarnessInstallError(f"cannot start {argv[0]!r}: {exc}") from exc
    with proc:
        assert proc.stdout is not None
        tail: list[str] = []
        try:
            for line in proc.stdout:
                line = line.rstrip()
                if line:
                    tail = [*tail, line][-tail_lines:]
                    say(line)
        except BaseException:
            proc.kill()
            raise
        rc = proc.wait()
    return rc, tail


# ------------------------------------------------------------------------ mini-swe-agent


def harness_cache_dir() -> Path:
    """Root of the cached harness runtimes: ``$CLAWRL_HARNESS_CACHE`` or
    ``~/.cache/clawrl/harnesses`` (shared with ``tools/harnesses/install.sh``)."""
    env = os.environ.get("CLAWRL_HARNESS_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "clawrl" / "harnesses"


class MiniSweAgentHarness(HarnessAdapter):
    """mini-swe-agent (PyPI ``mini-swe-agent``) in tool-calling mode (its ``mini.yaml``).

    Runtime: a virtual environment built with ``uv`` on ``python`` (Debian's
    ``/usr/bin/python3``, which every sandbox sees under the host's ``/usr``) at
    ``<cache>/mini-swe-agent-<version>/venv`` — the layout of ``tools/harnesses/install.sh``,
    under the same lock and ``.complete`` stamp, so either one installs it once for both — and
    mounted read-only at the same path in the sandbox (its scripts hold absolute paths).
    First install: ~3 min, ~550 MB (litellm). Invocation (shared/HARNESSES.md):
    ``mini -m openai/<model> -t <task> -y --exit-immediately -c mini.yaml -c
    agent.step_limit=N -c model.model_kwargs.api_base=<url> -o traj.json``; the run ends when
    the model runs ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` or at the step limit. The
    trajectory file is collected as the log ``trajectory``.

    Args:
        version: the PyPI version (pinned as in ``tools/harnesses/versions.json``).
        python: interpreter the environment is built on (must be visible in the sandbox).
        cache_dir: runtime cache root (default :func:`harness_cache_dir`).
    """

    name = "mini-swe-agent"
    api: WireAPI | None = "openai.chat"
    VERSION = "2.4.6"

    def __init__(
        self,
        version: str = VERSION,
        python: str = "/usr/bin/python3",
        cache_dir: Path | None = None,
    ) -> None:
        self.version = version
        self.python = python
        self.cache_dir = cache_dir or harness_cache_dir()

    @property
    def prefix(self) -> Path:
        """``<cache>/mini-swe-agent-<version>``."""
        return self.cache_dir / f"mini-swe-agent-{self.version}"

    @property
    def venv(self) -> Path:
        return self.prefix / "venv"

    def installed(self) -> bool:
        return (self.prefix / ".complete").is_file() and (self.venv / "bin" / "mini").is_file()

    def prepare(self, progress: ProgressFn | None = None) -> None:
        """Build the environment unless cached (``uv venv`` + ``uv pip install``).

        Raises:
            HarnessInstallError: no ``uv``, no interpreter, or the install failed.
        """
        say = progress or (lambda _msg: None)
        if self.installed():
            return
        uv = shutil.which("uv")
        if uv is None:
            raise HarnessInstallError("mini-swe-agent: `uv` is not on PATH (pip install uv)")
        if not Path(self.python).is_file():
            raise HarnessInstallError(f"mini-swe-agent: interpreter {self.python} not found")
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with open(self.cache_dir / ".install.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the lock tools/harnesses/install.sh takes too
            if self.installed():
                return
            started = time.monotonic()
            shutil.rmtree(self.prefix, ignore_errors=True)
            say(f"mini-swe-agent {self.version}: building a venv on {self.python} (~3 min)")
            env = {**os.environ, "VIRTUAL_ENV": str(self.venv)}
            steps = [
                [uv, "venv", "-q", "--python", self.python, str(self.venv)],
                [uv, "pip", "install", f"mini-swe-agent=={self.version}"],
            ]
            try:
                for argv in steps:
                    rc, tail = run_streamed(argv, say, env=env)
                    if rc != 0:
                        raise HarnessInstallError(
                            f"mini-swe-agent install failed ({' '.join(argv[:3])}): "
                            + "\n".join(tail[-5:])
                        )
                (self.prefix / "bin").mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(FileExistsError):
                    (self.prefix / "bin" / "mini").symlink_to("../venv/bin/mini")
            except BaseException:
                shutil.rmtree(self.prefix, ignore_errors=True)
                raise
            (self.prefix / ".complete").touch()
            say(f"mini-swe-agent {self.version}: installed in {time.monotonic() - started:.0f} s")

    def mounts(self, task: Task) -> dict[str, str]:
        return {str(self.venv): str(self.venv)}

    def launch(self, ctx: HarnessContext) -> HarnessLaunch:
        traj = f"{ctx.log_dir}/trajectory.json"
        argv = [
            str(self.venv / "bin" / "mini"),
            "-m",
            f"openai/{ctx.model}",
            "-t",
            ctx.task.instruction,
            "-y",
            "--exit-immediately",
            "-c",
            "mini.yaml",
            "-c",
            f"agent.step_limit={ctx.max_turns}",
            "-c",
            "agent.cost_limit=0",
            "-c",
            f"model.model_kwargs.api_base={ctx.openai_base_url}",
            "-o",
            traj,
        ]
        if ctx.max_tokens:
            argv += ["-c", f"model.model_kwargs.max_tokens={ctx.max_tokens}"]
        env = {
            "MSWEA_CONFIGURED": "true",
            "MSWEA_COST_TRACKING": "ignore_errors",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "MSWEA_GLOBAL_CONFIG_DIR": f"{ctx.log_dir}/config",
            "OPENAI_API_KEY": ctx.api_key,
            "PYTHONUNBUFFERED": "1",
        }
        return HarnessLaunch(
            argv=tuple(argv),
            env=env,
            workdir=ctx.task.workspace_path,
            files={f"{ctx.log_dir}/config/.keep": ""},
            log_paths={"trajectory": traj},
        )

    def outcome(self, exit_code: int, logs: Mapping[str, str], stdout: str) -> HarnessOutcome:
        traj = _json_or_empty(logs.get("trajectory", ""))
        info = traj.get("info") if isinstance(traj.get("info"), dict) else {}
        assert isinstance(info, dict)
        exit_status = str(info.get("exit_status") or "")
        messages = traj.get("messages")
        turns = (
            sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
            if isinstance(messages, list)
            else None
        )
        # Ended by itself: submitted, step/cost/time limit, or it gave up after repeated
        # malformed model answers (a model failure, not a harness failure).
        ended = {
            "Submitted": "submitted",
            "LimitsExceeded": "turn_limit",
            "TimeExceeded": "time_limit",
            "RepeatedFormatError": "repeated_format_error",
        }
        if exit_status in ended:
            return HarnessOutcome(ok=True, end_reason=ended[exit_status], turns=turns)
        reason = exit_status or f"exit code {exit_code}"
        if not traj:
            reason = f"exit code {exit_code}, no trajectory written"
        return HarnessOutcome(
            ok=False,
            end_reason=_slug(exit_status) if exit_status else f"exit_code_{exit_code}",
            reason=reason,
            turns=turns,
        )

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "version": self.version, "python": self.python}


# -------------------------------------------------------------------------------- oracle


class OracleHarness(HarnessAdapter):
    """Runs the task's oracle (``solution/solve.sh``) as the agent; no model, no session.

    The solution files are mounted read-only at ``task.solution.mount_path`` (``/solution``)
    in *this* rollout's sandbox only. A task without a solution cannot run (the runner
    reports ``harness-error``). Exit 0 = ok.
    """

    name = "oracle"
    api: WireAPI | None = None
    needs_model = False

    def mounts(self, task: Task) -> dict[str, str]:
        if task.solution is None:
            return {}
        return {str(task.solution.files_dir.resolve()): task.solution.mount_path}

    def launch(self, ctx: HarnessContext) -> HarnessLaunch:
        task = ctx.task
        if task.solution is None:
            return HarnessLaunch(
                argv=("sh", "-c", "echo 'task has no solution' >&2; exit 65"),
                workdir=task.workspace_path,
            )
        return HarnessLaunch(
            argv=tuple(task.solution.command),
            env={"CLAWRL_WORKSPACE": task.workspace_path, **task.env},
            workdir=task.workspace_path,
        )

    def outcome(self, exit_code: int, logs: Mapping[str, str], stdout: str) -> HarnessOutcome:
        if exit_code == 0:
            return HarnessOutcome(ok=True, end_reason="solved")
        if exit_code == 65:
            return HarnessOutcome(ok=False, end_reason="no_solution", reason="task has no solution")
        return HarnessOutcome(
            ok=False, end_reason=f"exit_code_{exit_code}", reason=f"solve.sh exit code {exit_code}"
        )


# ------------------------------------------------------------------------------ registry


def _node(name: str) -> Callable[[], HarnessAdapter]:
    def make() -> HarnessAdapter:
        from clawrl.bench.node_harnesses import make_node_harness  # lazy: import cycle

        return make_node_harness(name)

    return make


_REGISTRY: dict[str, Callable[[], HarnessAdapter]] = {
    "reference": ReferenceHarness,
    "mini-swe-agent": MiniSweAgentHarness,
    "oracle": OracleHarness,
    # the npm harnesses (clawrl.bench.node_harnesses)
    **{
        n: _node(n)
        for n in (
            "claude-code",
            "codex",
            "pi",
            "openclaw",
            "openclaw-anthropic-messages",
            "openclaw-openai-responses",
        )
    },
}


def harness_names() -> list[str]:
    """Names :func:`get_harness` knows."""
    return sorted(_REGISTRY)


def get_harness(name: str | HarnessAdapter) -> HarnessAdapter:
    """The adapter registered as ``name`` (an adapter instance is returned as is).

    Raises:
        ValueError: unknown name (the message lists the known ones).
    """
    if isinstance(name, HarnessAdapter):
        return name
    try:
        return _REGISTRY[name]()
    except KeyError:
        raise ValueError(f"unknown harness {name!r}; known: {', '.join(harness_names())}") from None


def _json_or_empty(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def _slug(text: str) -> str:
    return "".join(c.lower() if c.isalnum() else "_" for c in text).strip("_") or "unknown"
