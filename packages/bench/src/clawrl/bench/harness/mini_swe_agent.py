"""mini-swe-agent (PyPI ``mini-swe-agent``) in tool-calling mode, from a cached venv."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clawrl.bench.harness.base import (
    HarnessContext,
    HarnessInstallError,
    HarnessLaunch,
    HarnessOutcome,
    ProgressFn,
    WireAPI,
    json_or_empty,
)
from clawrl.bench.harness.install import CachedHarness, harness_cache_dir, run_streamed
from clawrl.bench.task import Task

__all__ = ["MiniSweAgentHarness"]

#: mini-swe-agent's exit statuses for a run that ended by itself: submitted, step / time
#: limit, or it gave up after repeated malformed model answers (a model failure, not a
#: harness failure) -> end reason
_ENDED = {
    "Submitted": "submitted",
    "LimitsExceeded": "turn_limit",
    "TimeExceeded": "time_limit",
    "RepeatedFormatError": "repeated_format_error",
}


class MiniSweAgentHarness(CachedHarness):
    """mini-swe-agent (PyPI ``mini-swe-agent``) in tool-calling mode (its ``mini.yaml``).

    Runtime: a virtual environment built with ``uv`` on ``python`` (Debian's
    ``/usr/bin/python3``, which every sandbox sees under the host's ``/usr``) at
    ``<cache>/mini-swe-agent-<version>/venv`` — the layout of ``tools/harnesses/install.sh``,
    under the same lock and ``.complete`` stamp, so either one installs it once for both — and
    mounted read-only at the same path in the sandbox (its scripts hold absolute paths).
    First install: ~3 min, ~550 MB (litellm). Invocation:
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
    key = "mini-swe-agent"
    api: WireAPI | None = "openai.chat"
    VERSION = "2.4.6"
    #: its shell tool (name, argument) and the command that ends its run
    shell_tool = ("bash", "command")
    finish_command = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

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
    def venv(self) -> Path:
        return self.prefix / "venv"

    @property
    def binary(self) -> Path:
        return self.venv / "bin" / "mini"

    def _preflight(self) -> None:
        if shutil.which("uv") is None:
            raise HarnessInstallError("mini-swe-agent: `uv` is not on PATH (pip install uv)")
        if not Path(self.python).is_file():
            raise HarnessInstallError(f"mini-swe-agent: interpreter {self.python} not found")

    def _install(self, say: ProgressFn) -> None:
        """``uv venv`` + ``uv pip install``, then ``<prefix>/bin/mini``."""
        uv = shutil.which("uv") or "uv"
        say(f"mini-swe-agent {self.version}: building a venv on {self.python} (~3 min)")
        env = {**os.environ, "VIRTUAL_ENV": str(self.venv)}
        steps = [
            [uv, "venv", "-q", "--python", self.python, str(self.venv)],
            [uv, "pip", "install", f"mini-swe-agent=={self.version}"],
        ]
        for argv in steps:
            rc, tail = run_streamed(argv, say, env=env)
            if rc != 0:
                raise HarnessInstallError(
                    f"mini-swe-agent install failed ({' '.join(argv[:3])}): " + "\n".join(tail[-5:])
                )
        (self.prefix / "bin").mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            (self.prefix / "bin" / "mini").symlink_to("../venv/bin/mini")

    def mounts(self, task: Task) -> dict[str, str]:
        return {str(self.venv): str(self.venv)}

    def launch(self, ctx: HarnessContext) -> HarnessLaunch:
        traj = f"{ctx.log_dir}/trajectory.json"
        argv = [
            str(self.binary),
            "-m", f"openai/{ctx.model}",
            "-t", ctx.task.instruction,
            "-y",
            "--exit-immediately",
            "-c", "mini.yaml",
            "-c", f"agent.step_limit={ctx.max_turns}",
            "-c", "agent.cost_limit=0",
            "-c", f"model.model_kwargs.api_base={ctx.openai_base_url}",
            # litellm's request limit (default 10 min) no shorter than the rollout's
            "-c", f"model.model_kwargs.timeout={ctx.client_timeout_s}",
            "-o", traj,
        ]  # fmt: skip
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
        traj = json_or_empty(logs.get("trajectory", ""))
        info = traj.get("info") if isinstance(traj.get("info"), dict) else {}
        assert isinstance(info, dict)
        exit_status = str(info.get("exit_status") or "")
        messages = traj.get("messages")
        turns = (
            sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
            if isinstance(messages, list)
            else None
        )
        if exit_status in _ENDED:
            return HarnessOutcome(ok=True, end_reason=_ENDED[exit_status], turns=turns)
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
        return {**super().describe(), "python": self.python}


def _slug(text: str) -> str:
    return "".join(c.lower() if c.isalnum() else "_" for c in text).strip("_") or "unknown"
