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
- ``outcome``: ``completed`` (always true here); ``success``: the verdict — true only when
  the intent's execution checks all passed in the sandbox and no assistant message holds a
  call-shaped text that never executed; ``label`` (``success``, ``failed`` — checks failed,
  ``unverified`` — the intent has no checks or they were not run, ``unexecuted_call``);
  ``simulator_success`` (the simulator's own ``is_success``, recorded beside the verdict; null
  for a single-turn session, which has no simulator) and ``reason`` (the simulator's);
  ``verified`` (1.0 / 0.0, else null) with ``verification`` (checks passed, failures);
  ``session_id``; and per user turn the query, the agent's reply, the workspace changes, the
  agent's end reason and counts.

:func:`validate_trajectory` checks this shape with the types kept uniform across lines (so a
columnar loader such as ``datasets.load_dataset("json", ...)`` infers one schema).
"""

from __future__ import annotations

import re
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
    "call_shaped_text",
    "read_jsonl",
    "simulator_agreement",
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


_CALL_MARKUP = re.compile(r"</?(?:tool_call|function_call|tool_use)>")
_CALL_KEY = re.compile(r"\"(?:name|function|tool)\"\s*:\s*\"([A-Za-z0-9_.-]+)\"")
_ARGS_KEY = re.compile(r"\"(?:arguments|parameters|args|input)\"\s*:\s*[{\"]")


def call_shaped_text(text: str, tool_names: Iterable[str] = ()) -> bool:
    """Whether ``text`` (an assistant message's content) holds a tool call written as text —
    ``<tool_call>`` / ``<function_call>`` markup, or a JSON object naming a tool (one of
    ``tool_names`` when given) with its arguments — that the harness's parser did not turn
    into a call, so it never executed."""
    if _CALL_MARKUP.search(text):
        return True
    if not _ARGS_KEY.search(text):
        return False
    names = set(tool_names)
    return any(not names or m.group(1) in names for m in _CALL_KEY.finditer(text))


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
    simulated: bool = True,
) -> dict[str, Any]:
    """The trajectory of a completed session from the agent's last transcript (the whole
    conversation), the executed tool calls, the per-turn records and the simulator's final
    answer; ``verification``: a checkable intent's check result (``reward``, ``passed``,
    ``checks``, ``failed``), else ``None`` (``outcome.verified`` is then null).

    ``outcome.success`` is decided by the checks alone: true iff ``verification`` passed
    every check and no assistant message holds call-shaped text that never executed
    (:func:`call_shaped_text`; ``stats.unexecuted_calls`` counts them, together with any call
    in the messages that is missing from ``tool_log``, the calls the harness executed). The
    simulator's ``is_success`` is kept as ``outcome.simulator_success`` (null when not
    ``simulated``: the single-turn ablation has no simulator). Raises
    :class:`TrajectoryError` when the result is malformed."""
    messages = [_message(m) for m in transcript.get("messages") or []]
    full = dict(stats)
    full.update(tool_call_stats(tool_log))
    tools = list(transcript.get("tools") or [])
    names = [str((t.get("function") or {}).get("name")) for t in tools if isinstance(t, dict)]
    executed = {str(c["tool_call_id"]) for c in tool_log if c.get("tool_call_id")}
    shaped = sum(
        m["role"] == "assistant" and call_shaped_text(m["content"], names) for m in messages
    )
    missing = (
        sum(
            str(c["id"]) not in executed
            for m in messages
            if m["role"] == "assistant"
            for c in m.get("tool_calls", [])
        )
        if executed
        else 0
    )
    full["unexecuted_calls"] = shaped + missing
    full["user_turns"] = sum(m["role"] == "user" for m in messages)
    full["assistant_turns"] = sum(m["role"] == "assistant" for m in messages)
    full["dialogue_turns"] = sum(m["role"] != "system" for m in messages)
    gens = int(full.get("simulator_generations", 0))
    full["drift_rate"] = (int(full.get("simulator_drifted", 0)) / gens) if gens else 0.0
    full["drift_reasons"] = [str(r) for r in full.get("drift_reasons", [])]
    passed = verification is not None and float(verification["reward"]) >= 1.0
    if verification is None:
        label = "unverified"
    elif not passed:
        label = "failed"
    elif full["unexecuted_calls"]:
        label = "unexecuted_call"
    else:
        label = "success"
    traj = {
        "id": f"ise-{intent.id}",
        "messages": messages,
        "tools": tools,
        "intent": intent.to_dict(),
        "persona": dict(intent.persona),
        "stats": full,
        "outcome": {
            "completed": True,
            "success": label == "success",
            "label": label,
            "simulator_success": reply.is_success if simulated else None,
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


def simulator_agreement(trajectories: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """How often the simulator's own ``is_success`` agrees with the execution checks' verdict,
    over the completed sessions that have both (a simulator verdict and checks that ran):
    ``sessions``, ``agree``, ``rate`` (null when no session has both),
    ``simulator_success_checks_failed`` (the simulator's false positives) and
    ``simulator_failure_checks_passed``."""
    n = agree = false_pos = false_neg = 0
    for t in trajectories:
        o = t.get("outcome") or {}
        sim = o.get("simulator_success")
        if sim is None or o.get("verified") is None:
            continue
        n += 1
        ok = bool(o.get("success"))
        agree += bool(sim) == ok
        false_pos += bool(sim) and not ok
        false_neg += ok and not bool(sim)
    return {
        "sessions": n,
        "agree": agree,
        "rate": round(agree / n, 4) if n else None,
        "simulator_success_checks_failed": false_pos,
        "simulator_failure_checks_passed": false_neg,
    }


def _session_key(t: Mapping[str, Any]) -> str:
    """One synthesis session: its ``session_id``, else the trajectory id and attempt."""
    sid = (t.get("outcome") or {}).get("session_id")
    return f"session:{sid}" if sid else f"{t.get('id')}#{t.get('attempt', 0)}"


def synthesis_report(
    trajectories: Iterable[Mapping[str, Any]],
    discarded: Iterable[Mapping[str, Any]] = (),
    intent_stats: Mapping[str, Any] | None = None,
    failed: Iterable[Mapping[str, Any]] = (),
    runs: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The paper's statistics of a synthesis run.

    ``trajectories``: the kept ones (``trajectories.jsonl``); ``failed``: completed sessions
    kept apart because their checks did not pass (``failed.jsonl``); a session in both (a
    failure kept as a target, ``failed_as_targets``) is counted once. Sessions are told apart
    by their ``session_id`` (else id and ``attempt``): best-of-n runs an intent several times
    under one trajectory id. Returns a dict: ``intents`` (``generated``, ``unique``, ``vendi``,
    ``embedding`` from the stage-1 stats file, when given), ``trajectories`` (``complete``:
    completed sessions, ``discarded``, ``discarded_by_reason``, ``success``: verified by the
    checks, ``by_label``), ``agreement`` (:func:`simulator_agreement`), per-trajectory
    distributions (mean / median / max / total) of ``user_turns``, ``dialogue_turns``,
    ``tool_calls``, ``distinct_tools``; ``failed_tool_calls``, ``failed_followed_by_recovery``
    and their ratio; ``unexecuted_calls``; ``distinct_tools_all`` (over the run); ``drift``
    (generations, ``drifted``: left the user role, ``invalid``: not the JSON contract, and
    ``rate`` = drifted / generations, ``rejected_rate`` = (drifted + invalid) / generations,
    over complete and discarded sessions); with ``runs`` (the lines of ``runs.jsonl``, one per
    call of :func:`~clawrl.ise_synth.synthesize`): ``yield`` — ``sessions`` run,
    ``verified`` trajectories, ``wall_s`` summed over the calls, ``verified_per_hour`` and
    ``sessions_per_verified``.
    """
    runs = list(runs)
    trajs = list(trajectories)
    kept = {_session_key(t) for t in trajs}
    trajs += [t for t in failed if _session_key(t) not in kept]
    disc = list(discarded)
    st = [t["stats"] for t in trajs]
    failed_calls = sum(int(s.get("failed_tool_calls", 0)) for s in st)
    recovered = sum(int(s.get("recovered_failures", 0)) for s in st)
    all_stats = st + [d.get("stats") or {} for d in disc]
    gens = sum(int(s.get("simulator_generations", 0)) for s in all_stats)
    drifted = sum(int(s.get("simulator_drifted", 0)) for s in all_stats)
    invalid = sum(int(s.get("simulator_invalid", 0)) for s in all_stats)
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
        "by_label": dict(Counter(str(t["outcome"].get("label", "unlabelled")) for t in trajs)),
    }
    report["agreement"] = simulator_agreement(trajs)
    for key in ("user_turns", "dialogue_turns", "tool_calls", "distinct_tools"):
        report[key] = _dist([float(s.get(key, 0)) for s in st])
    report["failed_tool_calls"] = failed_calls
    report["failed_followed_by_recovery"] = recovered
    report["recovery_rate"] = round(recovered / failed_calls, 4) if failed_calls else None
    report["unexecuted_calls"] = sum(int(s.get("unexecuted_calls", 0)) for s in st)
    report["distinct_tools_all"] = sorted({n for s in st for n in s.get("tools_used", [])})
    report["drift"] = {
        "generations": gens,
        "drifted": drifted,
        "invalid": invalid,
        "rate": (drifted / gens) if gens else 0.0,
        "rejected_rate": ((drifted + invalid) / gens) if gens else 0.0,
    }
    if runs:
        sessions = sum(int(r.get("sessions", 0)) for r in runs)
        verified = sum(int(r.get("verified", 0)) for r in runs)
        wall = sum(float(r.get("wall_s", 0.0)) for r in runs)
        report["yield"] = {
            "sessions": sessions,
            "verified": verified,
            "wall_s": round(wall, 1),
            "verified_per_hour": round(verified * 3600.0 / wall, 2) if wall > 0 else None,
            "sessions_per_verified": round(sessions / verified, 2) if verified else None,
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
    table.add_row("verified successes (checks passed)", str(tr["success"]))
    if tr.get("by_label"):
        table.add_row(
            "  complete by label", ", ".join(f"{k} {v}" for k, v in tr["by_label"].items())
        )
    ag = report.get("agreement") or {}
    if ag.get("sessions"):
        table.add_row(
            "simulator vs checks agreement",
            f"{100 * ag['rate']:.1f} % ({ag['agree']} / {ag['sessions']}; "
            f"{ag['simulator_success_checks_failed']} false successes)",
        )
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
    table.add_row("invalid simulator JSON", f"{d.get('invalid', 0)} / {d['generations']}")
    if report.get("unexecuted_calls"):
        table.add_row("call-shaped text never executed", str(report["unexecuted_calls"]))
    y = report.get("yield")
    if y:
        per_hour = y["verified_per_hour"]
        table.add_row(
            "yield: verified / sessions (wall)",
            f"{y['verified']} / {y['sessions']} ({y['wall_s'] / 60:.1f} min; "
            f"{per_hour if per_hour is not None else '—'} per hour)",
        )
    return table
