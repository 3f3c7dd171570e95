"""Rendering an :class:`IntentSpec` into a natural-language intent.

Two renderers:

* :class:`TemplateRenderer` — no LLM: templates per communication style, the persona's context
  and the selected tasks woven into one request, a closing line per complexity. Deterministic
  for a spec (its choices use ``numpy.random.default_rng([seed, index, 1])``).
* :class:`LLMRenderer` — any OpenAI-compatible Chat Completions endpoint (the ``openai`` SDK),
  with our prompt (:func:`llm_messages`); async, so many intents render concurrently.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import openai
from clawrl.ise_synth.errors import RenderError
from clawrl.ise_synth.sampling import IntentSpec

__all__ = ["LLMRenderer", "TemplateRenderer", "llm_messages"]


def _join(phrases: Sequence[str], last: str = "and") -> str:
    if len(phrases) == 1:
        return phrases[0]
    return ", ".join(phrases[:-1]) + f" {last} " + phrases[-1]


def _first_name(name: str) -> str:
    parts = [p for p in name.split() if not p.endswith(".")]
    return parts[0] if parts else name


_AN = re.compile(r"\b([Aa]) (?=[aeiAEI]|[oO](?!ne|nce)|[uU](?!ni|se|su))")


def _articles(text: str) -> str:
    """ "a expert" -> "an expert" (not before "one", "unit", "user", "usual")."""
    return _AN.sub(lambda m: m.group(1) + "n ", text)


_OPENERS = {
    "terse": ["", "Quick one. ", "Need this done: "],
    "formal": ["Good morning. ", "Hello. ", "Dear assistant, "],
    "casual": ["Hey! ", "Hi there, ", "Morning! "],
    "detailed": ["Context first. ", "Some background. ", ""],
    "non-technical": ["Hi, I'm not very technical, so bear with me. ", "Hello! ", "Hi, "],
}
_SELF = {  # work_context is a third-person verb phrase ("runs twelve stores"): use "who …"
    "terse": ["{role}, {industry}. ", "Context: {role} who {work_context}. ", ""],
    "formal": [
        "I am the {role} who {work_context}, working in {industry}. ",
        "As a {experience_level} {role} in {industry} who {work_context}, I have a request. ",
    ],
    "casual": [
        "I'm {first}, the {role} who {work_context}. ",
        "{first} here, {role} in {industry}, the one who {work_context}. ",
    ],
    "detailed": [
        "I am a {experience_level} {role} in {industry} (my background: {expertise}) "
        "who {work_context}. ",
        "Role: {role}, {industry}. Expertise: {expertise}. Situation: a {role} who "
        "{work_context}. ",
    ],
    "non-technical": [
        "I work as a {role} in {industry}, the person who {work_context}. ",
        "I'm a {role} who {work_context}. ",
    ],
}
_ASK = {
    "terse": ["{Tasks}.", "Please {tasks}.", "Todo: {tasks}."],
    "formal": [
        "Could you please {tasks}?",
        "I would be grateful if you could {tasks}.",
        "Kindly {tasks}.",
    ],
    "casual": ["Could you {tasks}?", "Can you {tasks} for me?", "Mind helping me {tasks}?"],
    "detailed": ["What I need: {steps}", "Please do the following: {steps}"],
    "non-technical": [
        "I need someone to {tasks} — whatever way works.",
        "Can you help me {tasks}? I don't mind how.",
    ],
}
_CLOSE = {
    "simple": ["", "Thanks.", "Keep it short."],
    "medium": [
        "Tell me briefly what you did.",
        "Keep the result in the workspace.",
        "Let me know if anything is unclear.",
    ],
    "complex": [
        "Check each step before moving on and tell me what you verified at the end.",
        "Work through it in order, keep intermediate files, and confirm the final result.",
        "If something fails, fix it and carry on; summarise what you checked when done.",
    ],
}


class TemplateRenderer:
    """Renders specs with templates; no LLM. ``name`` is ``"template"``."""

    name = "template"

    def render(self, spec: IntentSpec) -> str:
        """The intent text of ``spec`` (deterministic for the spec's seed and index)."""
        rng = np.random.default_rng([spec.seed, spec.index, 1])
        p = spec.persona
        style = p.communication_style if p.communication_style in _ASK else "formal"

        def pick(options: Sequence[str]) -> str:
            return options[int(rng.integers(len(options)))]

        tasks = [t.task for sel in spec.domains for t in sel.tasks]
        fields = {
            "role": p.role,
            "industry": p.industry,
            "work_context": p.work_context,
            "experience_level": p.experience_level,
            "expertise": p.expertise,
            "first": _first_name(p.name),
            "tasks": _join(tasks, last="and then"),
            "Tasks": _join(tasks, last="and then")[:1].upper() + _join(tasks, last="and then")[1:],
            "steps": " ".join(f"({i}) {t};" for i, t in enumerate(tasks, 1)).rstrip(";") + ".",
        }
        text = (
            pick(_OPENERS[style])
            + pick(_SELF[style]).format(**fields)
            + pick(_ASK[style]).format(**fields)
            + " "
            + pick(_CLOSE.get(spec.complexity, [""]))
        )
        return _articles(re.sub(r"\s+", " ", text).strip())


_SYSTEM = (
    "You write realistic requests that a person sends to an AI agent that can run shell "
    "commands, edit files and use tools in a workspace. Write as the person, in their own "
    "voice and register, never as the assistant. Output only the request text: no quotes, "
    "no preamble, no explanation."
)


def llm_messages(spec: IntentSpec, style_description: str = "") -> list[dict[str, str]]:
    """Our prompt for rendering ``spec``: a system and a user message (OpenAI chat format)."""
    p = spec.persona
    domain_lines = "\n".join(
        f"- {sel.domain.name}: " + "; ".join(t.task for t in sel.tasks) for sel in spec.domains
    )
    user = (
        f"The person: {p.name}, a {p.experience_level} {p.role} in {p.industry} "
        f"(expertise: {p.expertise}); they {p.work_context}.\n"
        f"Communication style: {p.communication_style}"
        + (f" ({style_description})" if style_description else "")
        + ".\n"
        f"Complexity: {spec.complexity}.\n"
        f"What they want done, by capability:\n{domain_lines}\n\n"
        "Write the one message this person would send to the agent to get all of this done, "
        "as a single concrete request grounded in their work (invent plausible file names and "
        "details). Match their communication style. 1–6 sentences."
    )
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]


_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)


class LLMRenderer:
    """Renders specs through an OpenAI-compatible endpoint.

    Args:
        model: model id to request.
        base_url: endpoint base URL (e.g. ``http://127.0.0.1:8000/v1``); None = the SDK default.
        api_key: API key (any string for local servers).
        temperature, max_tokens: sampling parameters sent.
        styles: communication style descriptions (``Taxonomy.communication_styles``).
        max_retries, timeout: passed to the SDK client (seconds).

    ``name`` is ``"llm:<model>"``.
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str = "EMPTY",
        temperature: float = 0.9,
        max_tokens: int = 400,
        styles: dict[str, str] | None = None,
        max_retries: int = 3,
        timeout: float = 120.0,
    ) -> None:
        self.model = model
        self.name = f"llm:{model}"
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.styles = styles or {}
        self.client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key, max_retries=max_retries, timeout=timeout
        )

    async def render(self, spec: IntentSpec) -> str:
        """The intent text for ``spec``. Raises RenderError when the request fails or the
        answer is empty (after removing any ``<think>…</think>`` block and outer quotes)."""
        messages = llm_messages(spec, self.styles.get(spec.persona.communication_style, ""))
        try:
            resp = await self.client.chat.completions.create(
                model=self.model,
                messages=messages,  # type: ignore[arg-type]
                temperature=self.temperature,
                max_tokens=self.max_tokens,
            )
        except openai.OpenAIError as exc:
            raise RenderError(f"intent {spec.index}: LLM request failed: {exc}") from exc
        if not resp.choices:
            raise RenderError(f"intent {spec.index}: LLM answered no choices")
        text = _THINK.sub("", resp.choices[0].message.content or "").strip()
        text = text.strip().strip('"“”').strip()
        if not text:
            raise RenderError(f"intent {spec.index}: LLM answered an empty text")
        return re.sub(r"[ \t]+", " ", text)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self.client.close()
