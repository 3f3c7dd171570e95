"""Trajectories (the ISE output, SFT input) and the statistics report.

A trajectory is one JSON object per line (docs/architecture.md, "Trajectory"):

- ``id``: ``"ise-<intent id>"``;
- ``messages``: OpenAI chat messages — ``system``; ``user``; ``assistant`` with ``content``
  (str), optional ``reasoning_content`` (str) and ``tool_calls`` (``[{"id", "type":
  "function", "function": {"name", "arguments": <JSON string>}}]``); ``tool`` with
  ``tool_call_id`` and ``content``;
- ``tools``: the function schemas offered to the agent;
- ``intent``: the stage-1 intent record; ``persona``: its persona;
- ``stats``: ``user_turns``, ``assistant_turns`` (model calls), ``dialogue_turns`` (every
  non-system message, the paper's "total dialogue turns"), ``tool_calls``,
  ``failed_tool_calls``, ``recovered_failures`` (failed calls followed later in the session by
  a successful call of the same tool), ``distinct_tools``, ``tools_used``,
  ``simulator_generations``, ``simulator_drifted``, ``drift_rate``, ``wall_s``;
- ``outcome``: ``completed`` (always true here), ``success`` and ``reason`` (the simulator's
  verdict; for a single-turn session, whether its checks passed), ``verified`` (a checkable
  intent's execution check, 1.0 / 0.0, else null) with ``verification`` (checks passed,
  failures), ``session_id``, and per user turn the query, the agent's reply, the workspace
  changes, the agent's end reason and counts.

:func:`validate_trajectory` checks this shape with the types kept uniform across lines (so a
columnar loader such as ``datasets.load_dataset("json", ...)`` infers one schema).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
from clawrl.bench import iter_json_objects
from clawrl.ise_synth.errors import IseSynthError
from clawrl.ise_synth.records import IntentRecord
from clawrl.ise_synth.simulator import SimulatorReply

__all__ = [
    "TrajectoryError",
    "append_jsonl",
    "build_trajectory",
    "read_jsonl",
    "synthesis_report",
    "tool_call_stats",
    "validate_trajectory",
]

_ROLES = {"system", "user", "assistant", "tool"}


class TrajectoryError(IseSynthError, ValueError):
    """A trajectory does not have the documented shape (the message names what is wrong)."""


def tool_call_stats(tool_log: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts over a session's executed tool calls (each ``{"name", "ok", ...}``, in order):
    ``tool_calls``, ``failed_tool_calls``, ``recovered_failures`` (a failed call followed
    later by a successful call of the same tool), ``distinct_tools``, ``tools_used``."""
    failed = recovered = 0
    for i, call in enumerate(tool_log):
        if call.get("ok"):
            continue
        failed += 1
        if any(c.get("ok") and c.get("name") == call.get("name") for c in tool_log[i + 1 :]):
            recovered += 1
    names = sorted({str(c.get("name")) for c in tool_log})
    return {
        "tool_calls": len(tool_log),
        "failed_tool_calls": failed,
        "recovered_failures": recovered,
        "distinct_tools": len(names),
        "tools_used": names,
    }


def _message(m: Mapping[str, Any]) -> dict[str, Any]:
    role = str(m.get("role"))
    out: dict[str, Any] = {"role": role, "content": str(m.get("content") or "")}
    if role == "assistant":
        if m.get("reasoning_content"):
            out["reasoning_content"] = str(m["reasoning_content"])
        calls = []
        for c in m.get("tool_calls") or []:
            fn = c.get("function") or {}
            args = fn.get("arguments")
            calls.append(
                {
                    "id": str(c.get("id", "")),
                    "type": "function",
                    "function": {
                        "name": str(fn.get("name")),
                        "arguments": args if isinstance(args, str) else orjson.dumps(args).decode(),
                    },
                }
            )
        if calls:
            out["tool_calls"] = calls
    elif role == "tool":
        out["tool_call_id"] = str(m.get("tool_call_id", ""))
    return out


def build_trajectory(
    intent: IntentRecord,
    transcript: Mapping[str, Any],
    tool_log: Sequence[Mapping[str, Any]],
    turns: Sequence[Mapping[str, Any]],
    reply: SimulatorReply,
    stats: Mapping[str, Any],
    *,
    session_id: str = "",
    verification: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The trajectory of a completed session from the agent's last transcript (the whole
    conversation), the executed tool calls, the per-turn records and the simulator's final
    verdict; ``verification``: a checkable intent's check result (``reward``, ``passed``,
    ``checks``, ``failed``), else ``None`` (``outcome.verified`` is then null). A single-turn
    session's ``success`` is its verification. Raises :class:`TrajectoryError` when the result
    is malformed."""
    messages = [_message(m) for m in transcript.get("messages") or []]
    full = dict(stats)
    full.update(tool_call_stats(tool_log))
    full["user_turns"] = sum(m["role"] == "user" for m in messages)
    full["assistant_turns"] = sum(m["role"] == "assistant" for m in messages)
    full["dialogue_turns"] = sum(m["role"] != "system" for m in messages)
    gens = int(full.get("simulator_generations", 0))
    full["drift_rate"] = (int(full.get("simulator_drifted", 0)) / gens) if gens else 0.0
    full["drift_reasons"] = [str(r) for r in full.get("drift_reasons", [])]
    traj = {
        "id": f"ise-{intent.id}",
        "messages": messages,
        "tools": list(transcript.get("tools") or []),
        "intent": intent.to_dict(),
        "persona": dict(intent.persona),
        "stats": full,
        "outcome": {
            "completed": True,
            "success": (
                bool(verification and verification["reward"] >= 1.0)
                if reply.reason == "single-turn session"
                else reply.success
            ),
            "reason": reply.reason,
            "verified": None if verification is None else float(verification["reward"]),
            "verification": dict(verification) if verification is not None else None,
            "session_id": session_id,
            "turns": [dict(t) for t in turns],
        },
    }
    validate_trajectory(traj)
    return traj


def validate_trajectory(traj: Mapping[str, Any]) -> None:
    """Check the trajectory shape (the module docstring): a system message
    first, known roles, string contents, every assistant tool call answered by a tool message
    with its id (in order, before the next assistant message), arguments as JSON strings,
    function schemas in ``tools``, and ``intent`` / ``persona`` / ``stats`` / ``outcome``
    objects.

    Raises:
        TrajectoryError: naming the first problem found.
    """

    def fail(msg: str) -> None:
        raise TrajectoryError(f"trajectory {traj.get('id', '?')}: {msg}")

    for key in ("intent", "persona", "stats", "outcome"):
        if not isinstance(traj.get(key), dict):
            fail(f"'{key}' must be an object")
    tools = traj.get("tools")
    if not isinstance(tools, list) or not all(
        isinstance(t, dict)
        and t.get("type") == "function"
        and isinstance((t.get("function") or {}).get("name"), str)
        for t in tools
    ):
        fail("'tools' must be a list of function schemas")
    messages = traj.get("messages")
    if not isinstance(messages, list) or not messages:
        fail("'messages' must be a non-empty list")
        return
    if messages[0].get("role") != "system":
        fail("the first message must be the system message")
    pending: list[str] = []
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in _ROLES:
            fail(f"message {i}: unknown role {role!r}")
        if not isinstance(m.get("content"), str):
            fail(f"message {i}: content must be a string")
        if role == "tool":
            if not pending or m.get("tool_call_id") != pending[0]:
                fail(f"message {i}: tool result {m.get('tool_call_id')!r} answers no pending call")
            pending.pop(0)
            continue
        if pending:
            fail(f"message {i}: tool calls {pending} were not answered")
        if role == "assistant":
            if "reasoning_content" in m and not isinstance(m["reasoning_content"], str):
                fail(f"message {i}: reasoning_content must be a string")
            for c in m.get("tool_calls", []):
                fn = c.get("function") if isinstance(c, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), str):
                    fail(f"message {i}: tool call arguments must be a JSON string")
                    return
                pending.append(str(c.get("id")))
    if pending:
        fail(f"tool calls {pending} were not answered")
    if not any(m.get("role") == "user" for m in messages):
        fail("no user message")


def append_jsonl(path: Path, obj: Mapping[str, Any]) -> None:
    """Append one JSON line and flush (the resume point of a run)."""
    with path.open("ab") as fh:
        fh.write(orjson.dumps(obj) + b"\n")
        fh.flush()


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Read JSON lines; a half-written last line (interrupted run) is skipped, any other bad
    line raises :class:`TrajectoryError`."""
    if path.exists():
        yield from iter_json_objects(path, TrajectoryError)


def _dist(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "median": 0.0, "max": 0.0, "total": 0.0}
    return {
        "mean": round(statistics.fmean(values), 3),
        "median": float(statistics.median(values)),
        "max": float(max(values)),
        "total": float(sum(values)),
    }


def synthesis_report(
    trajectories: Iterable[Mapping[str, Any]],
    discarded: Iterable[Mapping[str, Any]] = (),
    intent_stats: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The paper's statistics of a synthesis run.

    Returns a dict: ``intents`` (``generated``, ``unique``, ``vendi``, ``embedding`` from the
    stage-1 stats file, when given), ``trajectories`` (``complete``, ``discarded``,
    ``discarded_by_reason``, ``success``), per-trajectory distributions (mean / median / max /
    total) of ``user_turns``, ``dialogue_turns``, ``tool_calls``, ``distinct_tools``;
    ``failed_tool_calls``, ``failed_followed_by_recovery`` and their ratio; ``distinct_tools_all``
    (over the run); ``drift`` (drifted / all simulator generations, over complete and discarded
    sessions).
    """
    trajs = list(trajectories)
    disc = list(discarded)
    st = [t["stats"] for t in trajs]
    failed = sum(int(s.get("failed_tool_calls", 0)) for s in st)
    recovered = sum(int(s.get("recovered_failures", 0)) for s in st)
    all_stats = st + [d.get("stats") or {} for d in disc]
    gens = sum(int(s.get("simulator_generations", 0)) for s in all_stats)
    drifted = sum(int(s.get("simulator_drifted", 0)) for s in all_stats)
    report: dict[str, Any] = {}
    if intent_stats:
        report["intents"] = {
            "generated": intent_stats.get("generated"),
            "unique": intent_stats.get("unique"),
            "vendi": intent_stats.get("vendi"),
            "embedding": intent_stats.get("embedding"),
        }
    report["trajectories"] = {
        "complete": len(trajs),
        "discarded": len(disc),
        "discarded_by_reason": dict(Counter(str(d.get("reason")) for d in disc)),
        "success": sum(bool(t["outcome"].get("success")) for t in trajs),
    }
    for key in ("user_turns", "dialogue_turns", "tool_calls", "distinct_tools"):
        report[key] = _dist([float(s.get(key, 0)) for s in st])
    report["failed_tool_calls"] = failed
    report["failed_followed_by_recovery"] = recovered
    report["recovery_rate"] = round(recovered / failed, 4) if failed else None
    report["distinct_tools_all"] = sorted({n for s in st for n in s.get("tools_used", [])})
    report["drift"] = {
        "generations": gens,
        "drifted": drifted,
        "rate": (drifted / gens) if gens else 0.0,
    }
    return report


def report_table(report: Mapping[str, Any]) -> Any:
    """The report as a ``rich.table.Table`` (rows: the paper's statistics)."""
    from rich.table import Table

    table = Table(title="ISE synthesis statistics")
    table.add_column("statistic")
    table.add_column("value", justify="right")
    intents = report.get("intents") or {}
    if intents:
        table.add_row(
            "intents generated / unique", f"{intents.get('generated')} / {intents.get('unique')}"
        )
        vendi = intents.get("vendi")
        table.add_row("Vendi Score", f"{vendi:.2f} ({intents.get('embedding')})" if vendi else "—")
    tr = report["trajectories"]
    table.add_row("trajectories complete / discarded", f"{tr['complete']} / {tr['discarded']}")
    if tr["discarded_by_reason"]:
        table.add_row(
            "  discarded by reason",
            ", ".join(f"{k} {v}" for k, v in tr["discarded_by_reason"].items()),
        )
    ut = report["user_turns"]
    table.add_row(
        "user turns mean / median / max", f"{ut['mean']:.2f} / {ut['median']:g} / {ut['max']:g}"
    )
    dt = report["dialogue_turns"]
    table.add_row("total dialogue turns mean / max", f"{dt['mean']:.2f} / {dt['max']:g}")
    table.add_row(
        "tool calls mean / total",
        f"{report['tool_calls']['mean']:.2f} / {report['tool_calls']['total']:g}",
    )
    table.add_row("distinct tools mean", f"{report['distinct_tools']['mean']:.2f}")
    table.add_row(
        "failed tool calls / followed by recovery",
        f"{report['failed_tool_calls']} / {report['failed_followed_by_recovery']}",
    )
    d = report["drift"]
    table.add_row(
        "role drift rate", f"{100 * d['rate']:.2f} % ({d['drifted']} / {d['generations']})"
    )
    return table
