"""Multi-turn RL rollouts with a simulated user: a harness adapter for the rollout runner.

:class:`SimulatedUserHarness` (registry name ``simulated-user``, an entry point of this
package) runs the reference harness for the task's instruction, then sends the user's
follow-up turns one at a time — each resumes the whole conversation (``--messages-file``), so
the agent sees what it did and answers the new user message with more tool calls. Every model
call is the policy's, recorded by its proxy session like any single-turn rollout.

The reward is the task's verifier — for checkable intents exported with
:func:`~clawrl.ise_synth.export_bench_suite`, the execution checks, run by the rollout runner
after the last turn. The user has no say in it: the adapter cannot report a reward, and the
user program writes no verdict anywhere the verifier reads.

The follow-up turns here come from a scripted user: by default one turn asking the agent to
check its work and fix what is wrong (the simulator's last step before it ends a session).
An LLM user simulator inside the rollout would need its own model session reachable from the
sandbox; that is not wired yet.

With rl-core's train loop: ``[rollout] harnesses = ["simulated-user"]`` and tasks from
``synth export-tasks``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from clawrl.bench.harness import (
    HarnessContext,
    HarnessLaunch,
    HarnessOutcome,
    ReferenceHarness,
)

__all__ = ["DEFAULT_FOLLOW_UPS", "SimulatedUserHarness"]

#: The scripted user's follow-up turns (after the task's instruction).
DEFAULT_FOLLOW_UPS = (
    "Before we finish, please check your work: re-read the files you were asked to write and "
    "make sure each one holds exactly what I asked for. Fix anything that is wrong.",
)

#: The in-sandbox user program (stdlib): per user turn, write the query, run the reference
#: agent (resuming the conversation after the first turn), stop at the first failure; writes
#: ``user.json`` (the queries sent, each run's exit code) beside the transcript.
_DRIVER = r"""
import json, subprocess, sys
spec = json.load(open(sys.argv[1]))
runs = []
code = 0
for k, query in enumerate(spec["queries"]):
    with open(spec["task_file"], "w") as fh:
        fh.write(query)
    argv = spec["first"] if k == 0 else spec["resume"]
    code = subprocess.run(argv, cwd=spec["workdir"]).returncode
    runs.append({"query": query, "exit_code": code})
    if code != 0:
        break
with open(spec["user_log"], "w") as fh:
    json.dump({"turns": runs}, fh)
sys.exit(code)
"""


class SimulatedUserHarness(ReferenceHarness):
    """The reference harness driven over several user turns (see the module docstring).

    Args:
        follow_ups: the user's messages after the task's instruction, in order.
        **kwargs: :class:`~clawrl.bench.harness.ReferenceHarness` options.
    """

    name = "simulated-user"

    def __init__(self, follow_ups: Sequence[str] = DEFAULT_FOLLOW_UPS, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.follow_ups = tuple(str(q) for q in follow_ups)

    def launch(self, ctx: HarnessContext) -> HarnessLaunch:
        task_file = f"{ctx.log_dir}/query.md"
        transcript = f"{ctx.log_dir}/transcript.json"
        common: dict[str, Any] = {
            "base_url": ctx.openai_base_url,
            "model": ctx.model,
            "task_file": task_file,
            "workdir": ctx.task.workspace_path,
            "max_turns": ctx.max_turns,
            "transcript": transcript,
            "max_tokens": ctx.max_tokens,
        }
        user_log = f"{ctx.log_dir}/user.json"
        spec: dict[str, Any] = {
            "queries": [ctx.task.instruction, *self.follow_ups],
            "task_file": task_file,
            "workdir": ctx.task.workspace_path,
            "first": self.agent_argv(**common),
            "resume": self.agent_argv(**common, messages_file=transcript),
            "user_log": user_log,
        }
        driver, spec_file = f"{ctx.log_dir}/user_driver.py", f"{ctx.log_dir}/user_spec.json"
        return HarnessLaunch(
            argv=(self.python, driver, spec_file),
            env={"OPENAI_API_KEY": ctx.api_key},
            workdir=ctx.task.workspace_path,
            files={driver: _DRIVER, spec_file: json.dumps(spec)},
            log_paths={"transcript": transcript, "user": user_log},
        )

    def outcome(self, exit_code: int, logs: Mapping[str, str], stdout: str) -> HarnessOutcome:
        """The reference harness's verdict on the last user turn's run; a user program that
        stopped before its last turn (an agent run failed) is not ``ok``."""
        verdict = super().outcome(exit_code, logs, stdout)
        try:
            turns = json.loads(logs.get("user") or "{}").get("turns", [])
        except (ValueError, AttributeError):
            turns = []
        if verdict.ok and len(turns) != 1 + len(self.follow_ups):
            return HarnessOutcome(
                ok=False,
                end_reason="user_turns_incomplete",
                reason=f"the user program sent {len(turns)} of {1 + len(self.follow_ups)} turns",
                turns=verdict.turns,
            )
        return verdict

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "follow_ups": list(self.follow_ups)}
