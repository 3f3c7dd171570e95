"""Hypothesis: whatever the model generated and however a harness re-serialises the echo
(argument spacing and key order, tool-call ids, stripped whitespace), a conversation that only
appends never diverges, and every prompt holds the previous call's exact ids."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

from clawrl.proxy import format_assistant_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

text = st.text(alphabet="ab xyz.,:{}[]\"'\n\t-_é", max_size=20)
args = st.dictionaries(
    st.text(alphabet="abcdef", min_size=1, max_size=5),
    st.one_of(st.integers(-5, 5), st.text(alphabet="ab c", max_size=6), st.booleans(), st.none()),
    max_size=3,
)
turn = st.tuples(
    st.one_of(st.none(), text),  # reasoning
    text,  # content
    st.lists(st.tuples(st.sampled_from(["bash", "read_file"]), args), max_size=2),
    st.sampled_from(["compact", "spaced", "sorted"]),
)
TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
    for n in ("bash", "read_file")
]


def _raw(reasoning: str | None, content: str, calls: list[Any]) -> str:
    """Model-style text with its own spacing (the template would render it differently)."""
    out = f"<think>\n{reasoning}\n</think>\n\n" if reasoning is not None else ""
    out += f" {content} " if content.strip() else ""
    for name, a in calls:
        out += f'\n<tool_call>\n{{"name":"{name}", "arguments":{json.dumps(a, separators=(",", ":"))}}}\n</tool_call>'
    return out


def _echo(msg: dict[str, Any], style: str, rng: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": msg.get("content")}
    if "reasoning_content" in msg:
        out["reasoning_content"] = msg["reasoning_content"]
    calls = []
    for tc in msg.get("tool_calls") or []:
        a = json.loads(tc["function"]["arguments"])
        if style == "compact":
            s = json.dumps(a, separators=(",", ":"))
        elif style == "sorted":
            s = json.dumps(a, sort_keys=True, indent=1)
        else:
            s = json.dumps(a)
        calls.append(
            {
                "id": f"id{rng.randrange(10**6)}",
                "type": "function",
                "function": {"name": tc["function"]["name"], "arguments": s},
            }
        )
    if calls:
        out["tool_calls"] = calls
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(turns=st.lists(turn, min_size=1, max_size=4), seed=st.integers(0, 1000))
def test_appending_conversation_never_diverges(inproc: Any, turns: list[Any], seed: int) -> None:
    rng = random.Random(seed)
    script = [_raw(r, c, calls) for r, c, calls, _ in turns] + [
        format_assistant_text(content="end")
    ]
    sid, h = inproc.session(script)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
    for _, _, _, style in turns:
        r = inproc.chat(sid, h, {"messages": msgs, "tools": TOOLS})
        assert r.status_code == 200, r.text
        m = r.json()["choices"][0]["message"]
        msgs.append(_echo(m, style, rng))
        for tc in msgs[-1].get("tool_calls", []):
            msgs.append({"role": "tool", "tool_call_id": tc["id"], "content": "ok"})
        if msgs[-1]["role"] != "tool":
            msgs.append({"role": "user", "content": "go on"})
    assert inproc.chat(sid, h, {"messages": msgs, "tools": TOOLS}).status_code == 200
    recs = inproc.records(sid)
    for prev, rec in itertools.pairwise(recs):
        assert rec["prompt_relation"]["kind"] in ("extends", "spliced"), rec["prompt_relation"]
        full = prev["prompt_ids"] + prev["completion_ids"]
        assert rec["prompt_ids"][: len(full)] == full
