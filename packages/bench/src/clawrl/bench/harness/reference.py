"""clawrl's reference harness: ``reference_agent.py`` run by the sandbox's ``python3``."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from clawrl.bench.harness.base import (
    HarnessAdapter,
    HarnessContext,
    HarnessLaunch,
    HarnessOutcome,
    WireAPI,
    failed_exit_outcome,
    json_or_empty,
)
from clawrl.bench.task import Task

__all__ = ["REFERENCE_AGENT_MOUNT", "ReferenceHarness", "reference_agent_path"]

#: Where the reference agent program is mounted (read-only) inside the sandbox.
REFERENCE_AGENT_MOUNT = "/run/clawrl/harness/reference_agent.py"


def reference_agent_path() -> Path:
    """Host path of the reference harness program (package data)."""
    return Path(str(resources.files("clawrl.bench") / "harness_programs" / "reference_agent.py"))


class ReferenceHarness(HarnessAdapter):
    """clawrl's reference harness: ``reference_agent.py`` run by the sandbox's ``python3``.

    A stdlib-only program (no virtual environment), mounted read-only at
    :data:`REFERENCE_AGENT_MOUNT`; OpenAI Chat Completions, non-streamed; tools ``bash``,
    ``read_file``, ``write_file``, ``edit_file``. Exit 0 = final answer or turn limit, 2 = the
    model endpoint failed; its transcript (every message and tool execution) is collected as
    the log ``transcript``. :meth:`agent_argv` is its command line for callers that drive it
    themselves (ise-synth resumes a conversation with ``messages_file``).

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

    def mounts(self, task: Task | None = None) -> dict[str, str]:
        """The program, read-only at :data:`REFERENCE_AGENT_MOUNT` (for any task)."""
        return {str(reference_agent_path()): REFERENCE_AGENT_MOUNT}

    def agent_argv(
        self,
        *,
        base_url: str,
        model: str,
        task_file: str,
        workdir: str,
        max_turns: int,
        transcript: str,
        max_tokens: int | None = None,
        messages_file: str | None = None,
    ) -> list[str]:
        """The in-sandbox command line (the key comes from ``OPENAI_API_KEY``, never argv).

        ``messages_file``: resume that transcript's conversation (append the task as the
        next user message).
        """
        argv = [
            self.python, REFERENCE_AGENT_MOUNT,
            "--base-url", base_url,
            "--model", model,
            "--task-file", task_file,
            "--workdir", workdir,
            "--max-turns", str(max_turns),
            "--bash-timeout", f"{self.bash_timeout_s:g}",
            "--request-timeout", f"{self.request_timeout_s:g}",
            "--transcript", transcript,
        ]  # fmt: skip
        if max_tokens:
            argv += ["--max-tokens", str(max_tokens)]
        if messages_file:
            argv += ["--messages-file", messages_file]
        return argv

    def context_argv(
        self, ctx: HarnessContext, *, task_file: str, transcript: str, resume: bool = False
    ) -> list[str]:
        """:meth:`agent_argv` for a rollout: endpoint, model, workspace and limits from
        ``ctx``; ``resume``: continue ``transcript``'s conversation."""
        return self.agent_argv(
            base_url=ctx.openai_base_url,
            model=ctx.model,
            task_file=task_file,
            workdir=ctx.task.workspace_path,
            max_turns=ctx.max_turns,
            transcript=transcript,
            max_tokens=ctx.max_tokens,
            messages_file=transcript if resume else None,
        )

    def query_launch(
        self, ctx: HarnessContext, query: str, *, task_name: str = "task.md", resume: bool = False
    ) -> HarnessLaunch:
        """One run of the agent on ``query`` (written to ``<log_dir>/<task_name>``), its
        transcript at ``<log_dir>/transcript.json``; ``resume``: as the next user message of
        that transcript's conversation (a follow-up turn)."""
        task_file = f"{ctx.log_dir}/{task_name}"
        transcript = f"{ctx.log_dir}/transcript.json"
        return HarnessLaunch(
            argv=tuple(
                self.context_argv(ctx, task_file=task_file, transcript=transcript, resume=resume)
            ),
            env={"OPENAI_API_KEY": ctx.api_key},
            workdir=ctx.task.workspace_path,
            files={task_file: query},
            log_paths={"transcript": transcript},
        )

    def launch(self, ctx: HarnessContext) -> HarnessLaunch:
        return self.query_launch(ctx, ctx.task.instruction)

    def outcome(self, exit_code: int, logs: Mapping[str, str], stdout: str) -> HarnessOutcome:
        transcript = json_or_empty(logs.get("transcript", ""))
        end = str(transcript.get("end_reason") or "")
        turns = transcript.get("turns")
        turns = turns if isinstance(turns, int) else None
        if exit_code == 0 and end in {"final_answer", "turn_limit"}:
            return HarnessOutcome(ok=True, end_reason=end, turns=turns)
        if exit_code == 2:
            err = str(transcript.get("error") or "model endpoint failed")
            return HarnessOutcome(ok=False, end_reason="model_error", reason=err, turns=turns)
        return failed_exit_outcome(exit_code, end, turns=turns)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "python": self.python, "bash_timeout_s": self.bash_timeout_s}
