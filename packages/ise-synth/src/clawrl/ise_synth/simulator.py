"""Stage 2: the role-locked user simulator.

A user simulator plays the human user of an ISE session: it holds the persona and the hidden
intent, and after each agent turn it answers one JSON object

    {"completed": bool, "next_query": str, "reason": str, "success": bool}

``completed`` ends the session (``success`` says whether the intent was met); otherwise
``next_query`` is the next user message. Principles (ISE, arXiv 2606.11520): *perspective lock*
(it always speaks as the user, never as the assistant), *register matching* (the persona's
communication style), *incremental advancement* (one small step per turn) and *responsive
conditioning* (it reacts to what the agent really did — its final reply and a summary of the
workspace changes — points out errors and asks for a final check).

Perspective lock is enforced: :func:`detect_drift` flags assistant-voice or tool-call-like
output (and :func:`parse_reply` non-JSON output); :class:`LLMUserSimulator` regenerates such
an answer up to ``max_regenerations`` times and counts every drifted generation, so the
session's drift rate = drifted generations / generations.

:class:`ScriptedUserSimulator` is a *test simulator* (named as such): it asks a fixed list of
queries derived from the intent, then declares the session complete.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
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
    "parse_reply",
    "scripted_queries",
    "simulator_messages",
]


@dataclass(frozen=True)
class SimulatorReply:
    """One parsed simulator answer (the JSON object of the module docstring)."""

    completed: bool
    next_query: str
    reason: str = ""
    success: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "completed": self.completed,
            "next_query": self.next_query,
            "reason": self.reason,
            "success": self.success,
        }


@dataclass(frozen=True)
class AgentTurn:
    """What the simulator sees of one exchange: the user query it sent, the agent's final
    reply, and optionally a summary of the workspace changes that turn made."""

    query: str
    reply: str
    workspace_changes: str = ""


@dataclass
class SimulatorTurn:
    """A simulator decision plus its bookkeeping: ``generations`` made (≥ 1), ``drifted``
    among them (each with its reason in ``drift_reasons``)."""

    reply: SimulatorReply
    generations: int = 1
    drifted: int = 0
    drift_reasons: list[str] = field(default_factory=list)


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
    (re.compile(r"^\s*\W*(?:next_query|completed)\W*\s*$", re.I), "template-leak"),
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
    """Parse a simulator answer: one JSON object with ``completed`` (bool), ``next_query``
    (str; required non-empty when not completed), ``reason`` (str) and ``success`` (bool).
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
    completed, query = obj.get("completed"), obj.get("next_query", "")
    reason, success = obj.get("reason", ""), obj.get("success", False)
    if not isinstance(completed, bool):
        raise SimulatorError("'completed' must be a boolean")
    if query is None:
        query = ""
    if not isinstance(query, str) or not isinstance(reason, str):
        raise SimulatorError("'next_query' and 'reason' must be strings")
    if not isinstance(success, bool):
        raise SimulatorError("'success' must be a boolean")
    if not completed and not query.strip():
        raise SimulatorError("'next_query' is empty but the session is not completed")
    return SimulatorReply(completed, query.strip(), reason.strip(), success)


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
3. Incremental advancement: one small, concrete step per message; do not ask for everything \
at once.
4. Responsive conditioning: react to what the agent actually did (its reply and the workspace \
changes); point out errors or missing pieces; before finishing, ask for a final check.
5. When the goal is fully met (or clearly cannot be met), end the session.

Answer with ONE JSON object and nothing else:
{{"completed": <true|false>, "next_query": "<your next message, empty if completed>", \
"reason": "<why, one sentence>", "success": <true if the goal was met>}}"""


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
        lines.append(f"[turn {i}] AGENT replied: {turn.reply or '(no reply)'}")
        if turn.workspace_changes:
            lines.append(f"[turn {i}] workspace changes: {turn.workspace_changes}")
    left = max_turns - len(history)
    lines.append(
        f"\nYou have at most {left} more message(s). Decide: is your goal met? If not, write "
        "your next message (one small step, react to what the agent really did). Answer with "
        "the JSON object only."
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

    Every generation is checked by :func:`parse_reply` and :func:`detect_drift` (on the
    ``next_query``); a failing one counts as drifted and is regenerated. After K + 1 failed
    generations :meth:`respond` raises :class:`SimulatorDriftError` carrying the counts.
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
    ) -> None:
        if max_regenerations < 0:
            raise ValueError("max_regenerations must be >= 0")
        self.client = client
        self.model = model
        self.max_regenerations = max_regenerations
        self.max_user_turns = max_user_turns
        self.temperature = temperature
        self.max_tokens = max_tokens

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
        for attempt in range(self.max_regenerations + 1):
            text = await self._generate(messages)
            try:
                reply = parse_reply(text)
            except SimulatorError as exc:
                reasons.append(f"invalid: {exc}")
                continue
            if not history and reply.completed:
                reasons.append("invalid: completed before the first query")
                continue
            drift = detect_drift(reply.next_query) if not reply.completed else None
            if drift is not None:
                reasons.append(drift)
                continue
            return SimulatorTurn(reply, attempt + 1, len(reasons), reasons)
        raise SimulatorDriftError(
            f"no valid user turn after {self.max_regenerations + 1} generations: {reasons[-1]}",
            generations=self.max_regenerations + 1,
            drifted=len(reasons),
            reasons=reasons,
        )


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
    ``success`` = True. Never drifts. For end-to-end tests and pipeline dry runs."""

    name = "scripted"

    def __init__(
        self, queries: Sequence[str] | None = None, *, max_queries: int | None = None
    ) -> None:
        self.queries = list(queries) if queries is not None else None
        self.max_queries = max_queries

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
        return SimulatorTurn(SimulatorReply(True, "", "scripted queries done", True))
