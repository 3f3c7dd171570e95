"""Stage 2: the role-locked user simulator.

A user simulator plays the human user of an ISE session: it holds the persona and the hidden
intent, and after each agent turn it answers one JSON object

    {"completed": bool, "query": str, "reason": str, "is_success": bool}

``completed`` ends the session (``is_success`` is the simulator's own opinion of whether the
intent was met — recorded and compared with the execution checks, never the verdict);
otherwise ``query`` is the next user message. Principles (ISE, arXiv 2606.11520): *perspective lock*
(it always speaks as the user, never as the assistant), *register matching* (the persona's
communication style), *incremental advancement* (one small step per turn) and *responsive
conditioning* (it reacts to what the agent really did — its final reply, its tool calls and
their results, summarised, and the workspace changes — points out errors and asks the agent to
check its work before it ends the session).

Perspective lock is enforced: :func:`detect_drift` flags assistant-voice or tool-call-like
output and :func:`parse_reply` validates the JSON contract; :class:`LLMUserSimulator`
regenerates a rejected answer up to ``max_regenerations`` times and counts each rejection as
*drifted* (left the user role) or *invalid* (not the JSON contract), so a session's drift rate
= drifted generations / generations.

:class:`ScriptedUserSimulator` is a *test simulator* (named as such): it asks a fixed list of
queries derived from the intent, then declares the session complete.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from clawrl.ise_synth.errors import SimulatorDriftError, SimulatorError
from clawrl.ise_synth.records import IntentRecord

__all__ = [
    "AgentTurn",
    "LLMUserSimulator",
    "ScriptedUserSimulator",
    "SimulatorReply",
    "SimulatorTurn",
    "UserSimulator",
    "detect_drift",
    "last_agent_turn",
    "parse_reply",
    "scripted_queries",
    "simulator_messages",
    "summarise_tool_calls",
]


@dataclass(frozen=True)
class SimulatorReply:
    """One parsed simulator answer (the JSON object of the module docstring)."""

    completed: bool
    query: str
    reason: str = ""
    is_success: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "completed": self.completed,
            "query": self.query,
            "reason": self.reason,
            "is_success": self.is_success,
        }


@dataclass(frozen=True)
class AgentTurn:
    """What the simulator sees of one exchange: the user query it sent, the agent's final
    reply, and optionally a summary of the workspace changes that turn made, of the tool
    calls the agent executed with their results (:func:`summarise_tool_calls`), and the state
    of the files the request names (``requested_files``: present with their size, or
    missing)."""

    query: str
    reply: str
    workspace_changes: str = ""
    tool_summary: str = ""
    requested_files: str = ""


@dataclass
class SimulatorTurn:
    """A simulator decision plus its bookkeeping: ``generations`` made (≥ 1), ``drifted`` (left
    the user role) and ``invalid`` (not the JSON contract) among them, each rejection's reason
    in ``drift_reasons``."""

    reply: SimulatorReply
    generations: int = 1
    drifted: int = 0
    drift_reasons: list[str] = field(default_factory=list)
    invalid: int = 0


class UserSimulator(Protocol):
    """Anything that decides the next user turn of a session.

    ``history`` is empty for the opening query. Raises :class:`SimulatorError` (or its
    :class:`SimulatorDriftError` subclass) when no valid answer could be produced; the
    session is then discarded.
    """

    name: str

    async def respond(
        self, intent: IntentRecord, history: Sequence[AgentTurn]
    ) -> SimulatorTurn: ...


# ----------------------------------------------------------------------------- drift


_ASSISTANT_VOICE = [
    (re.compile(r"\bas an (ai|assistant|ai language model|language model)\b", re.I), "as-an-ai"),
    (
        re.compile(
            r"\bI(?:'ve| have) (created|written|updated|generated|completed|implemented|"
            r"added|fixed|saved|run|executed|set up|prepared)\b",
            re.I,
        ),
        "assistant-report",
    ),
    (
        re.compile(
            r"\bI (created|wrote|updated|generated|implemented|executed|ran|fixed|saved)\b", re.I
        ),
        "assistant-report",
    ),
    (
        re.compile(r"^\s*(sure|certainly|of course|absolutely)[,!.]?\s+(here|I)\b", re.I),
        "assistant-opener",
    ),
    (re.compile(r"^\s*here(?:'s| is| are) (the|your|a|an)\b", re.I), "here-is"),
    (re.compile(r"\bhow (can|may) I (help|assist) you\b", re.I), "offer-help"),
    (re.compile(r"\bI(?:'ll| will) now (run|create|write|execute|call)\b", re.I), "assistant-plan"),
    (re.compile(r"\blet me know if (you need|there'?s) anything else\b", re.I), "assistant-closer"),
    (re.compile(r"\bI(?:'m| am) sorry,? but I (?:can(?:'t|not)|am unable)\b", re.I), "refusal"),
]
# the user asking the agent what *it* wants, offering service, or narrating the agent in the
# third person: seen from Qwen2.5-Coder-0.5B as simulator, which the voice
# patterns above missed ("What would you like to do next?", "Welcome to … Please ask me …")
_ROLE_INVERSION = [
    (re.compile(r"\bwhat (?:would|do|did) you (?:like|want|need)\b", re.I), "role-inversion"),
    (re.compile(r"\bwhat (?:specific )?(?:tasks?|request) are you\b", re.I), "role-inversion"),
    (re.compile(r"\bplease provide (?:the |more |any )?details\b", re.I), "role-inversion"),
    (
        re.compile(r"\bI(?:'m| am) (?:ready|happy|here) to (?:assist|help|process)\b", re.I),
        "role-inversion",
    ),
    (re.compile(r"\b(?:welcome to|ask me (?:for|about|anything))\b", re.I), "role-inversion"),
    (re.compile(r"\bthe (?:agent|assistant) (?:will|should|took|did|has)\b", re.I), "narration"),
    (re.compile(r"\b(?:start|begin) the conversation\b", re.I), "narration"),
    (
        re.compile(r"^\s*\W*(?:next_query|query|completed|is_success)\W*\s*$", re.I),
        "template-leak",
    ),
    # our own turn instruction echoed back as the user's message (simulator_messages)
    (
        re.compile(
            r"\byou have at most \d+ more message\(s\)|\bdecide: is your goal met\b"
            r"|\breact to what the agent (?:really|actually) did\b"
            r"|\banswer with the json object only\b",
            re.I,
        ),
        "template-leak",
    ),
]
_TOOL_LIKE = [
    (re.compile(r"</?tool_call>|</?function_call>|<\|im_start\|>|<\|im_end\|>"), "tool-markup"),
    (
        re.compile(r"\"(name|function)\"\s*:\s*\"[^\"]+\"\s*,\s*\"(arguments|parameters)\"\s*:"),
        "tool-call-json",
    ),
    (re.compile(r"^\s*```(bash|sh|shell)\s*\n", re.I | re.M), "code-block-command"),
    (re.compile(r"^\s*(assistant|tool)\s*:", re.I), "role-prefix"),
]


def detect_drift(text: str) -> str | None:
    """Why ``text`` (a simulator's user query) is not in the user's voice, or ``None``.

    Heuristics: assistant voice ("As an AI", "I have created …", "Here is the …", "How can I
    help you", "Let me know if you need anything else", "Sure, here …"), tool-call-like
    output (``<tool_call>`` markup, chat-template tokens, ``{"name": …, "arguments": …}``
    shapes, a fenced shell block, an ``assistant:`` / ``tool:`` prefix), a refusal ("I'm
    sorry, but I can't …"), role inversion (the user asking what the agent would like,
    offering help, "Welcome to …"), third-person narration of the agent, and template
    leaks (a bare ``next_query``, or our turn instruction — "You have at most N more
    message(s) …" — echoed back as the query). Returns a short reason tag (e.g. ``"as-an-ai"``,
    ``"tool-call-json"``, ``"role-inversion"``).
    """
    for pattern, tag in (*_TOOL_LIKE, *_ASSISTANT_VOICE, *_ROLE_INVERSION):
        if pattern.search(text):
            return tag
    return None


_THINK = re.compile(r"<think>.*?</think>", re.S)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)


def parse_reply(text: str) -> SimulatorReply:
    """Parse a simulator answer: one JSON object with ``completed`` (bool), ``query``
    (str; required non-empty when not completed), ``reason`` (str) and ``is_success`` (bool).
    ``<think>`` blocks and a surrounding ```json fence are stripped; a JSON object embedded in
    surrounding prose is *not* accepted (that is drift).

    Raises:
        SimulatorError: not a JSON object, or a field missing / of the wrong type.
    """
    body = _THINK.sub("", text).strip()
    fence = _FENCE.match(body)
    if fence:
        body = fence.group(1)
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        raise SimulatorError(f"not JSON: {exc.msg}") from exc
    if not isinstance(obj, dict):
        raise SimulatorError("not a JSON object")
    completed, query = obj.get("completed"), obj.get("query", "")
    reason, success = obj.get("reason", ""), obj.get("is_success", False)
    if not isinstance(completed, bool):
        raise SimulatorError("'completed' must be a boolean")
    if query is None:
        query = ""
    if not isinstance(query, str) or not isinstance(reason, str):
        raise SimulatorError("'query' and 'reason' must be strings")
    if not isinstance(success, bool):
        raise SimulatorError("'is_success' must be a boolean")
    if not completed and not query.strip():
        raise SimulatorError("'query' is empty but the session is not completed")
    return SimulatorReply(completed, query.strip(), reason.strip(), success)


#: Bounds of what the simulator is shown of one agent turn (characters).
REPLY_CHARS = 1500
TOOL_SUMMARY_CHARS = 1200
_CALL_ARGS_CHARS = 100
_CALL_RESULT_CHARS = 160


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def last_agent_turn(query: str, messages: Any, workspace_changes: str = "") -> AgentTurn:
    """What the simulator sees of the agent's last run, from the conversation's chat
    ``messages``: the final assistant reply after the last user message, and that turn's
    tool calls with their results (:func:`summarise_tool_calls`). ``messages`` comes from a
    transcript in the agent's sandbox, so it may have any shape (:func:`_chat_messages`)."""
    messages = _chat_messages(messages)
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    this_turn = messages[last_user + 1 :]
    reply = next(
        (str(m.get("content") or "") for m in reversed(this_turn) if m.get("role") == "assistant"),
        "",
    )
    return AgentTurn(query, reply, workspace_changes, summarise_tool_calls(this_turn))


def _chat_messages(messages: Any) -> list[dict[str, Any]]:
    """The chat messages of a transcript's ``messages`` as the simulator reads them: the
    transcript lies in the agent's sandbox, where a process the agent left running can
    rewrite it after the run, so anything not of that shape is dropped (never an exception
    that would take the rollout's batch down)."""
    if not isinstance(messages, list):
        return []
    out: list[dict[str, Any]] = []
    for m in messages:
        if not isinstance(m, dict):
            continue
        msg = {k: v for k, v in m.items() if k in ("role", "content", "tool_call_id")}
        msg = {k: v if isinstance(v, str) else str(v) for k, v in msg.items() if v is not None}
        calls = m.get("tool_calls")
        if isinstance(calls, list):
            msg["tool_calls"] = [
                {
                    "id": str(c.get("id", "")),
                    "function": {
                        "name": str(fn.get("name", "")),
                        "arguments": a  # summarise_tool_calls writes a dict or list as JSON
                        if isinstance(a := fn.get("arguments"), str | dict | list)
                        else str(a),
                    },
                }
                for c in calls
                if isinstance(c, dict) and isinstance(fn := c.get("function") or {}, dict)
            ]
        out.append(msg)
    return out


def summarise_tool_calls(
    messages: Sequence[Mapping[str, Any]], limit: int = TOOL_SUMMARY_CHARS
) -> str:
    """The tool calls in ``messages`` (OpenAI chat messages of one agent turn) with their
    results, one line each — ``bash {"command": "ls"} -> exit code 0 …`` — arguments and
    results clipped, at most ``limit`` characters in all (the calls that did not fit are
    counted: ``(+3 more calls)``); ``""`` when the turn made no call."""
    results = {
        str(m.get("tool_call_id", "")): str(m.get("content") or "")
        for m in messages
        if m.get("role") == "tool"
    }
    lines: list[str] = []
    calls = [
        c for m in messages if m.get("role") == "assistant" for c in (m.get("tool_calls") or [])
    ]
    used = 0
    for k, call in enumerate(calls):
        fn = call.get("function") or {}
        args = fn.get("arguments")
        args_text = args if isinstance(args, str) else json.dumps(args)
        result = results.get(str(call.get("id", "")), "(no result)")
        line = (
            f"{fn.get('name')} {_clip(args_text, _CALL_ARGS_CHARS)} -> "
            f"{_clip(result, _CALL_RESULT_CHARS)}"
        )
        if used + len(line) + 1 > limit:
            lines.append(f"(+{len(calls) - k} more calls)")
            break
        lines.append(line)
        used += len(line) + 1
    return "\n".join(lines)


#: A user message that asks the agent to check its work (the simulator must send one before
#: it ends a session).
CHECK_REQUEST = re.compile(
    r"\b(?:double[- ]?check|re-?check|check|verify|confirm|make sure|test|look again)\w*\b",
    re.I,
)


# ----------------------------------------------------------------------------- LLM

_SYSTEM = """You are role-playing a HUMAN USER who is talking to an AI agent that works in a \
Linux workspace (it can run commands and read and write files). You are NOT the assistant.

Who you are: {name}, {role} in {industry} ({experience_level}, expertise: {expertise}). \
Work context: {work_context}. Communication style: {communication_style}.

Your hidden goal (never paste it whole; reveal it step by step):
{intent}

Rules:
1. Perspective lock: always speak as the user, in the first person, asking or reacting. \
Never speak as the assistant, never say what "you (the assistant) did" in the assistant's voice, \
never write tool calls, commands in code blocks, or role prefixes.
2. Register matching: write the way this persona writes ({communication_style}).
3. Incremental advancement: start with ONE small first step; then one small, concrete step \
per message; do not ask for everything at once.
4. Responsive conditioning: react to what the agent actually did (its reply, the tool calls it \
ran and their results, and the workspace changes); point out errors or missing pieces.
5. Before you end the session, ask the agent to check its own work (re-read the files, re-run \
the numbers). End the session only after that check, when the goal is fully met or clearly \
cannot be met.

Answer with ONE JSON object and nothing else:
{{"completed": <true|false>, "query": "<your next message, empty if completed>", \
"reason": "<why, one sentence>", "is_success": <true if the goal was met>}}"""


def simulator_messages(
    intent: IntentRecord, history: Sequence[AgentTurn], max_turns: int
) -> list[dict[str, str]]:
    """The chat messages sent to the simulator LLM (our prompt): a system message with the
    persona, the hidden intent and the principles; one user message with the conversation so
    far (the agent's replies and workspace changes) and what to do next."""
    p = {
        k: intent.persona.get(k, "")
        for k in (
            "name",
            "role",
            "industry",
            "experience_level",
            "expertise",
            "work_context",
            "communication_style",
        )
    }
    system = _SYSTEM.format(intent=intent.intent, **p)
    if not history:
        task = (
            "The conversation has not started. Write your FIRST message to the agent: the first "
            "small step towards your goal. completed must be false."
        )
        return [{"role": "system", "content": system}, {"role": "user", "content": task}]
    lines = []
    for i, turn in enumerate(history, 1):
        lines.append(f"[turn {i}] YOU wrote: {turn.query}")
        if turn.tool_summary:
            lines.append(f"[turn {i}] AGENT ran these tools (results clipped):")
            lines.extend("    " + ln for ln in turn.tool_summary.splitlines())
        reply = _clip(turn.reply, REPLY_CHARS) if turn.reply else "(no reply)"
        lines.append(f"[turn {i}] AGENT replied: {reply}")
        if turn.workspace_changes:
            lines.append(f"[turn {i}] workspace changes: {turn.workspace_changes}")
        if turn.requested_files:
            lines.append(
                f"[turn {i}] the files you asked for, as they are now: {turn.requested_files}"
            )
    left = max_turns - len(history)
    lines.append(
        f"\nYou have at most {left} more message(s). Decide: is your goal met? If not, write "
        "your next message (one small step, react to what the agent really did). Answer with "
        "the JSON object only."
    )
    if not any(CHECK_REQUEST.search(t.query) for t in history):
        lines.append(
            "You have not asked the agent to check its work yet: if the goal looks met, do not "
            "end the session now; set completed to false and ask it to check (query)."
        )
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n".join(lines)}]


class LLMUserSimulator:
    """The user simulator on any OpenAI-compatible chat endpoint (the ``openai`` SDK).

    Args:
        client: an ``openai.AsyncOpenAI`` client (e.g. on a clawrl proxy session).
        model: model id sent with each request.
        max_regenerations: extra generations after a drifted / non-JSON answer (K).
        max_user_turns: the session's user-turn cap (told to the model).
        temperature, max_tokens: sampling of each generation.
        require_check: reject ``completed`` until one of the user's earlier queries asked the
            agent to check its work (:data:`CHECK_REQUEST`).

    Every generation is validated by :func:`parse_reply` (the JSON contract; a failure counts
    as *invalid*) and :func:`detect_drift` on the ``query`` (a failure counts as *drifted*);
    a rejected generation is regenerated. After K + 1 rejected generations :meth:`respond`
    raises :class:`SimulatorDriftError` carrying the counts (the session is discarded).
    """

    name = "llm"

    def __init__(
        self,
        client: Any,
        model: str,
        *,
        max_regenerations: int = 3,
        max_user_turns: int = 20,
        temperature: float = 0.7,
        max_tokens: int | None = 512,
        require_check: bool = True,
    ) -> None:
        if max_regenerations < 0:
            raise ValueError("max_regenerations must be >= 0")
        self.client = client
        self.model = model
        self.max_regenerations = max_regenerations
        self.max_user_turns = max_user_turns
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.require_check = require_check

    async def _generate(self, messages: list[dict[str, str]]) -> str:
        import openai

        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
        }
        if self.max_tokens:
            kwargs["max_tokens"] = self.max_tokens
        try:
            response = await self.client.chat.completions.create(**kwargs)
        except openai.OpenAIError as exc:
            raise SimulatorError(f"simulator endpoint failed: {exc}") from exc
        if not response.choices:
            return ""
        return str(response.choices[0].message.content or "")

    async def respond(self, intent: IntentRecord, history: Sequence[AgentTurn]) -> SimulatorTurn:
        messages = simulator_messages(intent, history, self.max_user_turns)
        reasons: list[str] = []
        text = ""
        checked = any(CHECK_REQUEST.search(t.query) for t in history)
        for attempt in range(self.max_regenerations + 1):
            if reasons:  # a regeneration is told why the last answer was rejected
                messages = [
                    *messages,
                    {"role": "assistant", "content": text},
                    {"role": "user", "content": _rejected(reasons[-1])},
                ]
            text = await self._generate(messages)
            try:
                reply = parse_reply(text)
            except SimulatorError as exc:  # the answer's start, to see what the model wrote
                reasons.append(f"invalid: {exc} (answer: {text[:60]!r})")
                continue
            if not history and reply.completed:
                reasons.append("invalid: completed before the first query")
                continue
            if reply.completed and self.require_check and not checked:
                reasons.append("invalid: completed before asking the agent to check its work")
                continue
            drift = detect_drift(reply.query) if not reply.completed else None
            if drift is not None:
                reasons.append(drift)
                continue
            drifted, invalid = _counts(reasons)
            return SimulatorTurn(reply, attempt + 1, drifted, reasons, invalid)
        drifted, invalid = _counts(reasons)
        raise SimulatorDriftError(
            f"no valid user turn after {self.max_regenerations + 1} generations: {reasons[-1]}",
            generations=self.max_regenerations + 1,
            drifted=drifted,
            invalid=invalid,
            reasons=reasons,
        )


def _rejected(reason: str) -> str:
    """The note a regeneration gets about the answer that was rejected."""
    if reason.startswith("invalid: "):
        why = reason.removeprefix("invalid: ")
    else:
        why = f"it does not read as the user ({reason}): write as the user, in the first person"
    return (
        f"That answer was rejected: {why}. Answer again with the JSON object only "
        '({"completed": ..., "query": ..., "reason": ..., "is_success": ...}); when completed '
        "is false, query must be your next message to the agent."
    )


def _counts(reasons: Sequence[str]) -> tuple[int, int]:
    """(drifted, invalid) among rejection reasons."""
    invalid = sum(r.startswith("invalid") for r in reasons)
    return len(reasons) - invalid, invalid


# ----------------------------------------------------------------------------- scripted


def scripted_queries(intent: IntentRecord, max_queries: int | None = None) -> list[str]:
    """The queries of :class:`ScriptedUserSimulator` for ``intent``: one per task of the
    intent's domains (one small step each; the first also carries the intent text), then a
    request for a final check — at most ``max_queries`` (≥ 2) in all, the check included."""
    steps = [
        (str(d.get("name", d.get("domain"))), str(task))
        for d in intent.domains
        for task in d.get("tasks", [])
    ]
    if max_queries is not None:
        if max_queries < 2:
            raise ValueError("max_queries must be >= 2")
        steps = steps[: max_queries - 1]
    queries = [f"Next step ({name}): {task}" for name, task in steps]
    if queries:
        queries[0] = f"{intent.intent}\nLet's start with: {steps[0][1]}"
    else:
        queries = [intent.intent]
    queries.append("Please double-check the files you made and summarise the result.")
    return queries


class ScriptedUserSimulator:
    """A *test simulator* (named as such): the fixed queries of :func:`scripted_queries` (or
    ``queries``), one per turn, ignoring the agent's replies; then ``completed`` with
    ``is_success`` (default True, whatever the agent did). Never drifts. For end-to-end tests and pipeline dry runs."""

    name = "scripted"

    def __init__(
        self,
        queries: Sequence[str] | None = None,
        *,
        max_queries: int | None = None,
        is_success: bool = True,
    ) -> None:
        self.queries = list(queries) if queries is not None else None
        self.max_queries = max_queries
        self.is_success = is_success

    def queries_for(self, intent: IntentRecord) -> list[str]:
        """The queries this simulator asks for ``intent``, in order."""
        if self.queries is not None:
            return list(self.queries)
        return scripted_queries(intent, self.max_queries)

    async def respond(self, intent: IntentRecord, history: Sequence[AgentTurn]) -> SimulatorTurn:
        queries = self.queries_for(intent)
        k = len(history)
        if k < len(queries):
            return SimulatorTurn(SimulatorReply(False, queries[k], "scripted step"))
        return SimulatorTurn(SimulatorReply(True, "", "scripted queries done", self.is_success))
