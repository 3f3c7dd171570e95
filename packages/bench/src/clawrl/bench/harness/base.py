"""The harness adapter protocol: context, launch description, verdict, base class.

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
the turn and token caps and the task. Every in-sandbox path a launch writes lies under
:attr:`HarnessContext.log_dir`, so a launch can also be played on the host with a temporary
directory as ``log_dir`` (``tools/harnesses/capture_requests.py`` does).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
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
    "HarnessTurn",
    "ProgressFn",
    "WireAPI",
]

#: In-sandbox directory where adapters make their harness write its own logs.
HARNESS_LOG_DIR = "/tmp/clawrl-harness"

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
        log_dir: in-sandbox directory for the harness's own logs and state
            (:data:`HARNESS_LOG_DIR`); every file a launch writes lies under it.
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

    @property
    def client_timeout_s(self) -> int:
        """The limit a harness's own HTTP client or run deadline is given: the rollout's
        wall-clock limit plus a minute, so on a slow backend the runner's limit (which
        follows the backend's measured speed) ends a rollout, never the harness's client."""
        return int(self.timeout_s + 60)


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


@dataclass(frozen=True)
class HarnessTurn:
    """What a multi-turn adapter is told after one of its runs ended with exit 0 (see
    :meth:`HarnessAdapter.follow_up`).

    Attributes:
        number: runs done so far in this rollout (1 after the first).
        logs: the last run's logs collected by name (its launch's ``log_paths``).
        stdout: the last run's standard output.
        endpoint: the runner's model endpoint (a ``clawrl.proxy.ModelEndpoint``; ``None``
            without a model): an adapter may open sessions of its own on it, such as a
            simulated user's, which are never part of the rollout's records.
        run_id: the rollout runner's run id (labels for such sessions).
    """

    number: int
    logs: Mapping[str, str]
    stdout: str
    endpoint: Any = None
    run_id: str = ""


def exit_code_outcome(exit_code: int, ok_reason: str = "exited", what: str = "") -> HarnessOutcome:
    """The verdict from the exit status alone: 0 = ok (``ok_reason``), else
    ``exit_code_<n>`` with the reason ``"<what> exit code <n>"``."""
    if exit_code == 0:
        return HarnessOutcome(ok=True, end_reason=ok_reason)
    return failed_exit_outcome(exit_code, what=what)


def failed_exit_outcome(
    exit_code: int, end: str = "", *, what: str = "", turns: int | None = None
) -> HarnessOutcome:
    """The verdict on a harness that failed with ``exit_code``: end reason ``end`` (the
    harness's own word for how it ended, if any) or ``exit_code_<n>``, reason
    ``"<what> exit code <n> (<end>)"``."""
    prefix = f"{what} " if what else ""
    detail = f" ({end})" if end else ""
    return HarnessOutcome(
        ok=False,
        end_reason=end or f"exit_code_{exit_code}",
        reason=f"{prefix}exit code {exit_code}{detail}",
        turns=turns,
    )


class HarnessAdapter(ABC):
    """Base class of harness adapters (see the module docstring for the protocol).

    Attributes:
        name: registry name (``reference``, ``mini-swe-agent``, ``oracle``, ...).
        api: the wire API the harness speaks (``None`` for harnesses without a model).
        needs_model: whether the sandbox needs the model socket + forwarder.
        plays_user: a multi-turn adapter whose follow-up turns come from a model playing the
            user; such an adapter reads ``user_endpoint``.
        user_endpoint: the ``clawrl.proxy.ModelEndpoint`` the user is played on (set by the
            caller, e.g. ``train``'s ``rollout.user_model``); ``None``: the runner's own
            endpoint (``HarnessTurn.endpoint``), i.e. the model being served plays the user.
    """

    name: str = ""
    api: WireAPI | None = "openai.chat"
    needs_model: bool = True
    plays_user: bool = False
    user_endpoint: Any = None

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
        return exit_code_outcome(exit_code)

    async def follow_up(self, ctx: HarnessContext, turn: HarnessTurn) -> HarnessLaunch | None:
        """Another run in the same sandbox after a run ended with exit 0 — a multi-turn
        harness: a user's next message resuming the conversation — or ``None`` when the
        rollout's agent phase is over (the default: one run). All runs share the rollout's
        time limit; the outcome is judged on the last run. Called by the runner only."""
        return None

    async def end_rollout(self, ctx: HarnessContext) -> Mapping[str, str]:
        """Release what :meth:`follow_up` held for this rollout (called once per rollout
        that launched, whatever happened) and return logs kept on the host, by name: they
        join the rollout's logs, and the agent's sandbox never held them (default: none)."""
        return {}

    def describe(self) -> dict[str, Any]:
        """JSON-able description saved with results (name, version, options)."""
        return {"name": self.name, "api": self.api}


def json_or_empty(text: str) -> dict[str, Any]:
    """``text`` parsed as a JSON object; ``{}`` when empty, invalid or not an object."""
    try:
        data = json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}
