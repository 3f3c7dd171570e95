"""Shared by the harness adapter tests: a built-in task and a harness context for it."""

from __future__ import annotations

from clawrl.bench import load_builtin_suite
from clawrl.bench.harness import HarnessContext

TASK = next(t for t in load_builtin_suite() if t.id == "csv_to_markdown")


def make_context(**kw: object) -> HarnessContext:
    """A context of session ``s1`` for :data:`TASK` (``kw`` overrides any field)."""
    base: dict[str, object] = {
        "task": TASK,
        "session_id": "s1",
        "api_key": "key-1",
        "openai_base_url": "http://127.0.0.1:8000/s/s1/v1",
        "anthropic_base_url": "http://127.0.0.1:8000/s/s1",
        "max_turns": 5,
        "max_tokens": 77,
    }
    base.update(kw)
    return HarnessContext(**base)  # type: ignore[arg-type]
