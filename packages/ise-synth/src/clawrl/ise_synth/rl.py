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

:class:`SimulatedUserHarness`'s follow-up turns come from a scripted user: by default one
turn asking the agent to check its work and fix what is wrong (the simulator's last step
before it ends a session). :class:`LLMSimulatedUserHarness` (``simulated-user-llm``) has the
LLM user simulator decide each follow-up from what the agent did, driven by the rollout
runner on the host (``HarnessAdapter.follow_up``).

With rl-core's train loop: ``[rollout] harnesses = ["simulated-user"]`` (or
``"simulated-user-llm"``) and tasks from ``synth export-tasks``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from clawrl.bench import Task
from clawrl.bench.harness import (
    HarnessContext,
    HarnessLaunch,
    HarnessOutcome,
    HarnessTurn,
    ReferenceHarness,
)
from clawrl.ise_synth.errors import IseSynthError, SimulatorError
from clawrl.ise_synth.pipeline import ProxySimulatorFactory
from clawrl.ise_synth.records import IntentRecord
from clawrl.ise_synth.simulator import (
    AgentTurn,
    SimulatorTurn,
    UserSimulator,
    last_agent_turn,
)
from clawrl.proxy import ProxyError

__all__ = [
    "DEFAULT_FOLLOW_UPS",
    "LLMSimulatedUserHarness",
    "SimulatedUserHarness",
    "agent_turn",
    "task_intent",
]

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
        user_log = f"{ctx.log_dir}/user.json"
        spec: dict[str, Any] = {
            "queries": [ctx.task.instruction, *self.follow_ups],
            "task_file": task_file,
            "workdir": ctx.task.workspace_path,
            "first": self.context_argv(ctx, task_file=task_file, transcript=transcript),
            "resume": self.context_argv(
                ctx, task_file=task_file, transcript=transcript, resume=True
            ),
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
        try:  # the user log lies in the agent's sandbox: any shape may be there
            turns = json.loads(logs.get("user") or "{}").get("turns", [])
        except (ValueError, AttributeError, RecursionError):
            turns = []
        if not isinstance(turns, list):
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


@dataclass
class _UserState:
    """One rollout's simulated user: its intent, simulator, proxy session and the turns so
    far."""

    intent: IntentRecord
    simulator: UserSimulator
    history: list[AgentTurn] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)
    close: Callable[[], Awaitable[None]] | None = None


class LLMSimulatedUserHarness(ReferenceHarness):
    """The reference agent over several user turns, each follow-up decided by an LLM user
    simulator (:class:`~clawrl.ise_synth.LLMUserSimulator`, registry name
    ``simulated-user-llm``) from what the agent really did: its tool calls with their
    results and its final reply (the workspace itself is not summarised here).

    The rollout runner drives the turns (:meth:`follow_up`): after each agent run that ended
    well, the simulator — on a proxy session of its own, opened on ``user_endpoint`` when set
    (``train``'s ``rollout.user_model``: another model plays the user), else on the runner's
    endpoint (the model being served: in a train run, the current policy plays the user); its
    calls are never part of the rollout's records — answers ``{completed, query, reason, is_success}``; a
    query resumes the conversation, ``completed`` ends the rollout, as does the user-turn
    limit. A simulator that fails its JSON contract or leaves the user role on every
    regeneration ends the turns too: the rollout is scored like any other (the simulator's
    failures are not the policy's to hide behind). Its verdict is logged (``user`` log), never
    the reward: the task's verifier scores the workspace after the last turn.

    The intent comes from the task's ``user`` metadata (``synth export-tasks``; persona and
    intent, without the checks); a task without it is played from its instruction alone.

    Args:
        max_user_turns: user messages per rollout, the opening one (the task's instruction)
            included.
        max_regenerations, sim_max_tokens, temperature: the simulator's
            (:class:`~clawrl.ise_synth.LLMUserSimulator`).
        simulator_factory: ``(intent, endpoint, run_id) -> (simulator, close)`` instead of an
            LLM simulator on the endpoint (tests; any :class:`UserSimulator`).
        **kwargs: :class:`~clawrl.bench.harness.ReferenceHarness` options.
    """

    name = "simulated-user-llm"
    plays_user = True

    def __init__(
        self,
        max_user_turns: int = 3,
        *,
        max_regenerations: int = 2,
        sim_max_tokens: int = 160,
        temperature: float = 0.7,
        simulator_factory: SimulatorFactoryFn | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if max_user_turns < 1:
            raise ValueError("max_user_turns must be >= 1")
        self.max_user_turns = max_user_turns
        self.max_regenerations = max_regenerations
        self.sim_max_tokens = sim_max_tokens
        self.temperature = temperature
        self.simulator_factory = simulator_factory
        self._users: dict[str, _UserState] = {}

    def launch(self, ctx: HarnessContext) -> HarnessLaunch:
        return self.query_launch(ctx, ctx.task.instruction, task_name="query.md")

    async def _user(self, ctx: HarnessContext, endpoint: Any, run_id: str) -> _UserState:
        state = self._users.get(ctx.session_id)
        if state is not None:
            return state
        intent = task_intent(ctx.task)
        if self.simulator_factory is not None:
            sim, close = await self.simulator_factory(intent, endpoint, run_id)
        else:
            if self.user_endpoint is not None:  # a model of its own plays the user
                endpoint = self.user_endpoint
            if endpoint is None:
                raise SimulatorError("no model endpoint for the simulated user")
            factory = ProxySimulatorFactory(  # one per rollout: aclose ends its session
                endpoint,
                max_regenerations=self.max_regenerations,
                max_user_turns=self.max_user_turns,
                temperature=self.temperature,
                max_tokens=self.sim_max_tokens,
            )
            try:
                sim, close = await factory.for_session(intent, run_id), factory.aclose
            except BaseException:
                await factory.aclose()
                raise
        state = self._users[ctx.session_id] = _UserState(intent, sim, close=close)
        return state

    async def follow_up(self, ctx: HarnessContext, turn: HarnessTurn) -> HarnessLaunch | None:
        try:
            state = await self._user(ctx, turn.endpoint, turn.run_id)
        except (SimulatorError, ProxyError, OSError) as exc:
            self._users[ctx.session_id] = _UserState(task_intent(ctx.task), _NoUser())
            self._users[ctx.session_id].turns.append({"error": f"simulator: {exc}"})
            return None
        query = ctx.task.instruction if not state.history else state.turns[-1].get("query", "")
        state.history.append(agent_turn(str(query), turn.logs.get("transcript", "")))
        if len(state.history) >= self.max_user_turns:
            state.turns.append({"end": "user_turn_limit"})
            return None
        try:
            sim_turn = await state.simulator.respond(state.intent, state.history)
        except SimulatorError as exc:
            state.turns.append({"end": "simulator_failed", "error": str(exc)})
            return None
        reply = sim_turn.reply
        record = {
            "completed": reply.completed,
            "query": reply.query,
            "reason": reply.reason,
            "is_success": reply.is_success,
            "generations": sim_turn.generations,
            "drifted": sim_turn.drifted,
            "invalid": sim_turn.invalid,
        }
        state.turns.append(record)
        if reply.completed:  # the user ended the session
            return None
        return self.query_launch(ctx, reply.query, task_name="query.md", resume=True)

    async def end_rollout(self, ctx: HarnessContext) -> Mapping[str, str]:
        """Close the rollout's simulator session; its turns are the ``user`` log (kept on
        the host: the agent never had it)."""
        state = self._users.pop(ctx.session_id, None)
        if state is None:
            return {"user": json.dumps({"turns": []})}
        if state.close is not None:
            with contextlib.suppress(ProxyError, OSError):
                await state.close()
        return {"user": json.dumps({"turns": state.turns})}

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "max_user_turns": self.max_user_turns,
            "max_regenerations": self.max_regenerations,
            "sim_max_tokens": self.sim_max_tokens,
            "temperature": self.temperature,
            "simulator": "llm" if self.simulator_factory is None else "custom",
        }


SimulatorFactoryFn = Callable[
    [IntentRecord, Any, str],
    Awaitable[tuple[UserSimulator, Callable[[], Awaitable[None]] | None]],
]


class _NoUser:
    """The user of a rollout whose simulator could not be set up: no follow-up."""

    name = "none"

    async def respond(self, intent: IntentRecord, history: Sequence[AgentTurn]) -> SimulatorTurn:
        raise SimulatorError("no simulator")


def task_intent(task: Task) -> IntentRecord:
    """The simulated user's intent for ``task``: its ``user`` metadata (``synth
    export-tasks``), else a bare record built from the instruction."""
    raw = task.metadata.get("user")
    if isinstance(raw, str):
        with contextlib.suppress(ValueError, IseSynthError):
            return IntentRecord.from_dict(json.loads(raw))
    return IntentRecord(
        id=task.id,
        intent=task.instruction,
        persona={},
        domains=[],
        tools=[],
        skills=[],
        complexity="",
        renderer="task",
        seed=0,
        index=0,
    )


def agent_turn(query: str, transcript_text: str) -> AgentTurn:
    """What the simulator sees of the agent's last run, from the reference harness's
    transcript (JSON text)."""
    try:
        messages = json.loads(transcript_text or "{}").get("messages") or []
    except (ValueError, AttributeError, RecursionError):
        messages = []
    return last_agent_turn(query, messages)
