"""Stage 3: execution — ISE sessions run by a real agent in a podman sandbox.

One *session* per intent: one sandbox (created once; its ``/workspace`` persists across the
user turns), one proxy session for the agent. Per user turn:

1. the user simulator (stage 2) sees the conversation so far — the agent's final replies and a
   summary of the workspace changes each turn made — and answers the next query or ends the
   session;
2. the reference harness (:class:`clawrl.bench.harness.ReferenceHarness`, run by the sandbox's
   ``/usr/bin/python3``) resumes the whole conversation (``--messages-file``), appends the
   query and runs its tool loop against the model through the proxy session (the in-sandbox
   forwarder and the mounted model socket), so every tool call really executes — failures
   included;
3. the workspace is listed (path, size, SHA-256) before and after, and the difference
   summarised. Steps 2–3 are one ``exec`` into the sandbox per user turn.

A session that the simulator ends with ``completed`` becomes a trajectory
(:mod:`clawrl.ise_synth.trajectory`) — a *success* only when the intent's execution checks
pass in the sandbox, whatever the simulator said; one that reaches the user-turn cap without
completing, whose simulator cannot produce a valid turn, or whose agent fails, is *discarded*
with a reason and counted.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from clawrl.bench.harness import REFERENCE_AGENT_MOUNT, ReferenceHarness, reference_agent_path
from clawrl.ise_synth.checkable import check_program, is_checkable
from clawrl.ise_synth.errors import SimulatorDriftError, SimulatorError
from clawrl.ise_synth.records import IntentRecord
from clawrl.ise_synth.simulator import (
    AgentTurn,
    SimulatorReply,
    SimulatorTurn,
    UserSimulator,
    last_agent_turn,
)
from clawrl.ise_synth.trajectory import build_trajectory, tool_call_stats
from clawrl.proxy import ModelEndpoint, ProxyError, SessionInfo
from clawrl.sandbox import Limits, Sandbox, SandboxError, SandboxSpec

__all__ = [
    "AGENT_MOUNT",
    "AgentHook",
    "SessionConfig",
    "SessionResult",
    "SimulatorFactory",
    "run_session",
    "scripted_agent_completions",
    "workspace_changes",
]

#: Where the reference agent program is mounted (read-only) inside the session's sandbox.
AGENT_MOUNT = REFERENCE_AGENT_MOUNT
_STATE_DIR = "/tmp/clawrl-ise"
#: One user turn in one exec (stdlib, run by the sandbox's python3): list the workspace, write
#: the query, run the agent (its own timeout), read its transcript, list the workspace again;
#: prints one JSON object. The turn spec (agent argv, query, timeout) comes on stdin.
_TURN = r"""
import hashlib, json, os, subprocess, sys
def listing(root):
    out = {}
    for d, _, fs in os.walk(root):
        for f in fs:
            p = os.path.join(d, f)
            try:
                b = open(p, "rb").read()
            except OSError:
                continue
            out[os.path.relpath(p, root)] = [len(b), hashlib.sha256(b).hexdigest()]
    return out
spec = json.load(sys.stdin)
state = spec["state_dir"]
os.makedirs(state, exist_ok=True)
before = listing("/workspace")
with open(os.path.join(state, "query.md"), "w") as fh:
    fh.write(spec["query"])
out = {"before": before, "timed_out": False, "exit_code": None, "stderr": ""}
try:
    p = subprocess.run(spec["argv"], cwd="/workspace", capture_output=True, text=True,
                       errors="replace", timeout=spec["timeout"])
    out["exit_code"], out["stderr"] = p.returncode, p.stderr[-2000:]
except subprocess.TimeoutExpired:
    out["timed_out"] = True
try:
    with open(os.path.join(state, "transcript.json")) as fh:
        out["transcript"] = json.load(fh)
except (OSError, ValueError) as exc:
    out["transcript"] = None
    out["stderr"] += " [no transcript: %s]" % exc
out["after"] = listing("/workspace")
print(json.dumps(out))
"""

AgentHook = Callable[[SessionInfo, IntentRecord], Awaitable[None]]


class SimulatorFactory(Protocol):
    """Builds the user simulator of one session (e.g. on its own proxy session)."""

    async def for_session(self, intent: IntentRecord, run_id: str) -> UserSimulator: ...


@dataclass(frozen=True)
class SessionConfig:
    """Knobs of stage 3 (every value has a default).

    Attributes:
        max_user_turns: user turns per session (N, ISE: 20); a session not completed by then
            is discarded.
        agent_max_turns: model calls of the agent per user turn.
        agent_max_tokens: per-call output cap the agent requests (``None``: the server's).
        agent_model: model name the agent sends.
        agent_timeout_s: wall-clock limit of one agent run (one user turn), seconds.
        bash_timeout_s: per-``bash``-call limit inside the agent, seconds.
        memory_mb: sandbox memory (processes + the tmpfs workspace), MiB.
        workspace_summary: show the simulator a summary of each turn's workspace changes.
        seed_files: files placed in ``/workspace`` at the start of every session.
        opening: who writes the first user message: ``"simulator"`` (its first small step)
            or ``"intent"`` (the intent text itself; the simulator takes over from turn 2).
        single_turn: the paper's single-turn ablation: the intent text is the only user
            message (``opening`` is taken as ``"intent"``), the simulator is never asked, and
            the session becomes a trajectory after that one agent turn (success: its checks
            passed, for a checkable intent).
        verify: run a checkable intent's checks (:mod:`clawrl.ise_synth.checkable`) in the
            sandbox when the session ends; the result goes into ``stats`` and the
            trajectory's ``outcome``.
    """

    max_user_turns: int = 20
    agent_max_turns: int = 20
    agent_max_tokens: int | None = None
    agent_model: str = "policy"
    agent_timeout_s: float = 600.0
    bash_timeout_s: float = 60.0
    memory_mb: int = 1024
    workspace_summary: bool = True
    seed_files: dict[str, str] = field(default_factory=dict)
    opening: Literal["simulator", "intent"] = "simulator"
    single_turn: bool = False
    verify: bool = True

    def __post_init__(self) -> None:
        if self.max_user_turns < 1 or self.agent_max_turns < 1:
            raise ValueError("max_user_turns and agent_max_turns must be >= 1")


@dataclass
class SessionResult:
    """The outcome of one session: a ``trajectory`` dict
    (docs/architecture.md, "Trajectory") when
    completed, else ``discard_reason`` (``turn_limit``, ``simulator_drift``,
    ``simulator_error``, ``agent_error``, ``infra_error``) with ``detail``; ``stats`` either
    way (see :func:`~clawrl.ise_synth.trajectory.build_trajectory`)."""

    intent_id: str
    trajectory: dict[str, Any] | None
    discard_reason: str = ""
    detail: str = ""
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def completed(self) -> bool:
        return self.trajectory is not None

    def discard_record(self) -> dict[str, Any]:
        return {
            "intent_id": self.intent_id,
            "reason": self.discard_reason,
            "detail": self.detail,
            "stats": self.stats,
        }


def workspace_changes(before: dict[str, Any], after: dict[str, Any]) -> str:
    """One line summarising the difference of two workspace listings (path → [size,
    sha256]): ``added a.txt (12 B); changed b.md (40 B); removed c``; ``""`` when equal."""
    parts = []
    for path in sorted(after.keys() - before.keys()):
        parts.append(f"added {path} ({after[path][0]} B)")
    for path in sorted(after.keys() & before.keys()):
        if after[path] != before[path]:
            parts.append(f"changed {path} ({after[path][0]} B)")
    for path in sorted(before.keys() - after.keys()):
        parts.append(f"removed {path}")
    return "; ".join(parts)


def requested_files(intent: IntentRecord, after: dict[str, Any]) -> str:
    """What the user can see of the files its request names (a checkable intent's check
    paths, which the intent text names too) in a workspace listing (path → [size, sha256]):
    ``notes.txt MISSING; a/README.md present (7 B); old.log gone``; ``""`` for an intent
    without checks. Only the simulator reads it: the checks alone decide success."""
    parts, seen = [], set()
    for c in intent.extra.get("checks") or []:
        path = c.get("path") if isinstance(c, dict) else None
        if not isinstance(path, str) or path in seen:
            continue
        seen.add(path)
        if c.get("kind") == "absent":
            parts.append(f"{path} {'still there' if path in after else 'gone'}")
        else:
            parts.append(
                f"{path} present ({after[path][0]} B)" if path in after else f"{path} MISSING"
            )
    return "; ".join(parts)


def _agent_argv(base_url: str, config: SessionConfig, resume: bool) -> list[str]:
    """The reference harness's command line for one user turn (``resume``: continue the
    conversation of the previous turns' transcript)."""
    transcript = f"{_STATE_DIR}/transcript.json"
    return ReferenceHarness(bash_timeout_s=config.bash_timeout_s).agent_argv(
        base_url=base_url,
        model=config.agent_model,
        task_file=f"{_STATE_DIR}/query.md",
        workdir="/workspace",
        max_turns=config.agent_max_turns,
        transcript=transcript,
        max_tokens=config.agent_max_tokens,
        messages_file=transcript if resume else None,
    )


class _SessionEnd(Exception):
    """A session ends without a trajectory: its discard reason and detail."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


class _SessionRun:
    """The state of one ISE session while :func:`run_session` drives it."""

    def __init__(
        self,
        intent: IntentRecord,
        simulator: UserSimulator,
        endpoint: ModelEndpoint,
        config: SessionConfig,
        run_id: str,
    ):
        self.intent, self.simulator, self.endpoint = intent, simulator, endpoint
        self.config, self.run_id = config, run_id
        self.t0 = time.time()
        self.sim_generations = self.sim_drifted = self.sim_invalid = 0
        self.drift_reasons: list[str] = []
        self.history: list[AgentTurn] = []
        self.turn_records: list[dict[str, Any]] = []
        self.tool_log: list[dict[str, Any]] = []
        self.transcript: dict[str, Any] = {}
        self.reply: SimulatorReply | None = None
        self.session: SessionInfo | None = None
        self.verification: dict[str, Any] | None = None

    @property
    def sid(self) -> str:
        return self.session.session_id if self.session is not None else ""

    def result(self, reason: str = "", detail: str = "", traj: bool = False) -> SessionResult:
        stats: dict[str, Any] = {
            "user_turns": len(self.history),
            "simulator": self.simulator.name,
            "simulator_generations": self.sim_generations,
            "simulator_drifted": self.sim_drifted,
            "simulator_invalid": self.sim_invalid,
            "drift_reasons": self.drift_reasons,
            "wall_s": round(time.time() - self.t0, 3),
            **tool_call_stats(self.tool_log),
            "verified": None if self.verification is None else self.verification["reward"],
        }
        if traj and self.reply is not None:
            trajectory = build_trajectory(
                self.intent,
                self.transcript,
                self.tool_log,
                self.turn_records,
                self.reply,
                stats,
                session_id=self.sid,
                verification=self.verification,
                simulated=not self.config.single_turn,
            )
            return SessionResult(self.intent.id, trajectory, stats=trajectory["stats"])
        return SessionResult(self.intent.id, None, reason, detail, stats)

    async def setup(self, agent_hook: AgentHook | None, image: str | None) -> Sandbox:
        """The agent's proxy session and sandbox. Raises SandboxError / ProxyError / OSError."""
        intent, config = self.intent, self.config
        self.session = await self.endpoint.admin.create_session(
            run_id=self.run_id,
            task_id=intent.id,
            harness="reference",
            group_id=intent.id,
            metadata={
                "ise": True,
                "complexity": intent.complexity,
                "primary_domain": intent.primary_domain,
            },
        )
        if agent_hook is not None:
            await agent_hook(self.session, intent)
        spec = SandboxSpec(
            image=image,
            files={f"/workspace/{k}": v for k, v in self.seed_files().items()},
            limits=Limits(
                memory=f"{config.memory_mb}m", workspace_size=f"{config.memory_mb // 2}m"
            ),
            model_socket=self.endpoint.model_socket,
            read_only_mounts={str(reference_agent_path()): AGENT_MOUNT},
            labels={"clawrl-ise.intent": intent.id[:60]},
        )
        return await Sandbox.create(spec, run_id=self.run_id)

    def seed_files(self) -> dict[str, str]:
        """``config.seed_files`` plus a checkable intent's workspace files."""
        files = dict(self.config.seed_files)
        for f in self.intent.extra.get("workspace") or []:
            files[str(f["path"])] = str(f["content"])
        return files

    async def verify(self, sb: Sandbox) -> None:
        """Run a checkable intent's checks in the sandbox (``self.verification``); a check run
        that fails is recorded as ``{"reward": 0.0, "error": ...}``, never raised."""
        if not (self.config.verify and is_checkable(self.intent)):
            return
        try:
            res = await sb.exec(
                ["/usr/bin/python3", "-c", check_program(self.intent.extra["checks"])],
                timeout=60,
                env={"CLAWRL_WORKSPACE": "/workspace"},
            )
            out = json.loads(res.stdout)
            self.verification = {
                "reward": float(out["reward"]),
                "passed": int(out["passed"]),
                "checks": int(out["checks"]),
                "failed": [str(f) for f in out.get("failed", [])],
            }
        except (SandboxError, OSError, ValueError, KeyError, TypeError) as exc:
            self.verification = {
                "reward": 0.0,
                "passed": 0,
                "checks": len(self.intent.extra["checks"]),
                "failed": [f"the checks did not run: {type(exc).__name__}: {exc}"[:300]],
            }

    async def next_query(self) -> str | None:
        """The simulated user's next query; ``None`` once it says the task is done.

        Raises:
            _SessionEnd: the simulator drifted, failed, or the turn limit was reached.
        """
        if self.config.single_turn:
            if not self.history:
                return self.intent.intent
            self.reply = SimulatorReply(True, "", "single-turn session")
            return None
        try:
            if not self.history and self.config.opening == "intent":
                turn = SimulatorTurn(SimulatorReply(False, self.intent.intent, "opening"), 0)
            else:
                turn = await self.simulator.respond(self.intent, self.history)
        except SimulatorDriftError as exc:
            self.sim_generations += exc.generations
            self.sim_drifted += exc.drifted
            self.sim_invalid += exc.invalid
            self.drift_reasons.extend(exc.reasons)
            reason = "simulator_invalid" if exc.all_invalid else "simulator_drift"
            raise _SessionEnd(reason, str(exc)) from exc
        except SimulatorError as exc:
            raise _SessionEnd("simulator_error", str(exc)) from exc
        self.sim_generations += turn.generations
        self.sim_drifted += turn.drifted
        self.sim_invalid += turn.invalid
        self.drift_reasons.extend(turn.drift_reasons)
        if turn.reply.completed:
            if not self.history:
                raise _SessionEnd("simulator_error", "completed before the first query")
            self.reply = turn.reply
            return None
        if len(self.history) >= self.config.max_user_turns:
            raise _SessionEnd("turn_limit", f"not completed after {len(self.history)} user turns")
        return turn.reply.query

    async def agent_turn(self, sb: Sandbox, query: str) -> None:
        """Run the reference agent on ``query`` in the sandbox and record the turn.

        Raises:
            _SessionEnd: the agent timed out or failed.
            SandboxError: the turn runner itself failed.
        """
        assert self.session is not None
        config, t_turn = self.config, time.time()
        spec_in = {
            "state_dir": _STATE_DIR,
            "query": query,
            "argv": _agent_argv(self.session.openai_base_url, config, resume=bool(self.history)),
            "timeout": config.agent_timeout_s,
        }
        res = await sb.exec(
            ["/usr/bin/python3", "-c", _TURN],
            stdin=json.dumps(spec_in).encode(),
            timeout=config.agent_timeout_s + 60,
            env={"OPENAI_API_KEY": self.session.api_key},
            max_output_bytes=1 << 28,
        )
        try:
            out = json.loads(res.stdout)
        except json.JSONDecodeError:
            raise SandboxError(
                f"turn runner failed (exit {res.exit_code}): {res.stderr[-300:]!r}"
            ) from None
        if out["timed_out"]:
            raise _SessionEnd("agent_error", f"agent still running at {config.agent_timeout_s:g} s")
        self.transcript = transcript = out.get("transcript") or {}
        if out["exit_code"] != 0 or not transcript.get("messages"):
            err = transcript.get("error") or out.get("stderr", "")[-300:]
            raise _SessionEnd("agent_error", f"exit {out['exit_code']}: {err}")
        self.record_turn(query, out, t_turn)

    def record_turn(self, query: str, out: dict[str, Any], t_turn: float) -> None:
        transcript = self.transcript
        for call in transcript.get("tool_calls", []):
            self.tool_log.append({**call, "user_turn": len(self.history)})
        changes = workspace_changes(out["before"], out["after"])
        summary = changes if self.config.workspace_summary else ""
        turn = last_agent_turn(query, transcript["messages"], summary)
        if self.config.workspace_summary:
            asked = requested_files(self.intent, out["after"])
            turn = replace(turn, requested_files=asked)
        final = turn.reply
        self.history.append(turn)
        self.turn_records.append(
            {
                "query": query,
                "reply": final,
                "workspace_changes": changes,
                "end_reason": transcript.get("end_reason"),
                "model_calls": transcript.get("turns"),
                "tool_calls": len(transcript.get("tool_calls", [])),
                "wall_s": round(time.time() - t_turn, 3),
            }
        )


async def run_session(
    intent: IntentRecord,
    simulator: UserSimulator,
    endpoint: ModelEndpoint,
    config: SessionConfig | None = None,
    *,
    run_id: str = "ise",
    agent_hook: AgentHook | None = None,
    image: str | None = None,
) -> SessionResult:
    """Run one ISE session for ``intent`` (see the module docstring).

    ``agent_hook`` is awaited once the agent's proxy session exists (e.g. to script a
    ScriptedBackend). Never raises for a failed session: the result carries the discard
    reason.
    """
    run = _SessionRun(intent, simulator, endpoint, config or SessionConfig(), run_id)
    admin = endpoint.admin
    try:
        sb = await run.setup(agent_hook, image)
    except (SandboxError, ProxyError, OSError) as exc:
        if run.session is not None:
            with contextlib.suppress(ProxyError, OSError):
                await admin.close_session(run.sid)
        return run.result("infra_error", f"setup: {type(exc).__name__}: {exc}")
    try:
        async with sb:
            try:
                while (query := await run.next_query()) is not None:
                    await run.agent_turn(sb, query)
            except _SessionEnd as end:
                await run.verify(sb)
                return run.result(end.reason, end.detail)
            await run.verify(sb)
    except (SandboxError, OSError) as exc:
        return run.result("infra_error", f"sandbox: {type(exc).__name__}: {exc}")
    finally:
        with contextlib.suppress(ProxyError, OSError):
            await admin.close_session(run.sid)
    return run.result(traj=True)


def scripted_agent_completions(queries: Sequence[str]) -> list[str]:
    """Completions for a *scripted test agent* (ScriptedBackend, named as such) answering
    ``queries`` one per user turn with well-formed tool calls of the reference harness:

    - turn 1 reads ``notes/context.md`` before it exists — a tool call that fails by design —
      then recovers (writes it, reads it back);
    - every turn writes ``work/step<k>.md`` (the query) and lists the work with ``bash``;
    - the last turn (the final check) runs ``bash`` over all step files;
    - each turn ends with a short final answer (with ``reasoning_content``).
    """
    from clawrl.proxy import format_assistant_text as fmt

    def call(name: str, args: dict[str, Any], reasoning: str | None = None) -> str:
        return fmt(reasoning=reasoning, tool_calls=[(name, args)])

    notes = "notes/context.md"
    out: list[str] = []
    n = len(queries)
    for k, query in enumerate(queries, 1):
        if k == 1:
            out.append(call("read_file", {"path": notes}, "Check the notes first."))
            create = {"path": notes, "content": f"# Context\n{query[:200]}\n"}
            out.append(call("write_file", create, "No notes yet; create them."))
            out.append(call("read_file", {"path": notes}))
        if k == n and n > 1:
            check = "wc -l work/*.md && ls -R"
            out.append(call("bash", {"command": check}, "Final check of every step file."))
            done = f"Checked {n - 1} step files; all present."
            out.append(fmt(reasoning="Everything is there.", content=done))
            continue
        step = f"work/step{k}.md"
        content = f"# Step {k}\n{query[:300]}\n"
        out.append(call("write_file", {"path": step, "content": content}, f"Record step {k}."))
        out.append(call("bash", {"command": f"ls work && grep -c Step {step}"}))
        out.append(fmt(reasoning="Summarise.", content=f"Done with step {k}: wrote {step}."))
    return out
