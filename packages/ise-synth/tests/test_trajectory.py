"""Trajectory format, tool-call statistics, the report, resume files and the stats CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from clawrl.ise_synth import (
    AgentTurn,
    IntentRecord,
    IntentSampler,
    SimulatorReply,
    TemplateRenderer,
    TrajectoryError,
    build_trajectory,
    call_shaped_text,
    load_taxonomy,
    read_jsonl,
    requested_files,
    simulator_messages,
    synthesis_report,
    tool_call_stats,
    validate_trajectory,
    workspace_changes,
)
from clawrl.ise_synth.cli import main
from hypothesis import given
from hypothesis import strategies as st

TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]


def _intent() -> IntentRecord:
    spec = IntentSampler(load_taxonomy(), seed=1).draw(0)
    return IntentRecord.from_spec(spec, TemplateRenderer().render(spec), "template")


def _transcript() -> dict[str, Any]:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "bash", "arguments": '{"command": "ls"}'},
    }
    return {
        "tools": TOOLS,
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "q1"},
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": "think",
                "tool_calls": [call],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "exit code 0\n"},
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": "q2"},
            {"role": "assistant", "content": "ok"},
        ],
    }


def _traj(**stats: Any) -> dict[str, Any]:
    log = [{"name": "bash", "ok": False}, {"name": "bash", "ok": True}]
    base = {"simulator_generations": 3, "simulator_drifted": 1, "drift_reasons": ["as-an-ai"]}
    base.update(stats)
    return build_trajectory(
        _intent(),
        _transcript(),
        log,
        [{"query": "q1"}, {"query": "q2"}],
        SimulatorReply(True, "", "all good", True),
        base,
        session_id="s1",
    )


def test_build_trajectory_has_the_design_shape() -> None:
    t = _traj()
    assert t["id"].startswith("ise-intent-")
    assert [m["role"] for m in t["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    a = t["messages"][2]
    assert a["content"] == "" and a["reasoning_content"] == "think"
    assert a["tool_calls"][0]["function"] == {"name": "bash", "arguments": '{"command": "ls"}'}
    assert t["messages"][3]["tool_call_id"] == "c1"
    assert t["tools"] == TOOLS and t["persona"] == t["intent"]["persona"]
    s = t["stats"]
    assert (s["user_turns"], s["assistant_turns"], s["dialogue_turns"]) == (2, 3, 6)
    assert (s["tool_calls"], s["failed_tool_calls"], s["recovered_failures"]) == (2, 1, 1)
    assert s["drift_rate"] == pytest.approx(1 / 3)
    # no checks ran: never a success, whatever the simulator said (it said yes)
    assert t["outcome"]["success"] is False and t["outcome"]["label"] == "unverified"
    assert t["outcome"]["simulator_success"] is True and t["outcome"]["session_id"] == "s1"
    orjson.loads(orjson.dumps(t))  # JSON-serialisable


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda t: t["messages"].pop(0), "system"),
        (lambda t: t["messages"].pop(3), "not answered"),
        (lambda t: t["messages"][3].update(tool_call_id="zz"), "answers no pending"),
        (lambda t: t["messages"][1].update(content=None), "content must be a string"),
        (lambda t: t["messages"][1].update(role="robot"), "unknown role"),
        (
            lambda t: t["messages"][2]["tool_calls"][0]["function"].update(arguments={}),
            "JSON string",
        ),
        (lambda t: t.update(tools=[{"name": "bash"}]), "function schemas"),
        (lambda t: t.pop("outcome"), "outcome"),
    ],
)
def test_validate_trajectory_names_the_problem(mutate: Any, match: str) -> None:
    t = _traj()
    mutate(t)
    with pytest.raises(TrajectoryError, match=match):
        validate_trajectory(t)


@given(
    st.lists(
        st.tuples(st.sampled_from(["bash", "read_file", "write_file"]), st.booleans()), max_size=30
    )
)
def test_tool_call_stats_invariants(calls: list[tuple[str, bool]]) -> None:
    s = tool_call_stats([{"name": n, "ok": ok} for n, ok in calls])
    assert s["tool_calls"] == len(calls)
    assert s["failed_tool_calls"] == sum(not ok for _, ok in calls)
    assert 0 <= s["recovered_failures"] <= s["failed_tool_calls"]
    assert s["distinct_tools"] == len({n for n, _ in calls}) == len(s["tools_used"])
    # a failure is recovered iff the same tool later succeeds
    expected = sum(
        1
        for i, (n, ok) in enumerate(calls)
        if not ok and any(m == n and k for m, k in calls[i + 1 :])
    )
    assert s["recovered_failures"] == expected


def test_workspace_changes_summary() -> None:
    before = {"a.txt": [1, "x"], "b.md": [2, "y"], "c": [3, "z"]}
    after = {"a.txt": [1, "x"], "b.md": [4, "w"], "d/e.csv": [5, "v"]}
    assert workspace_changes(before, after) == "added d/e.csv (5 B); changed b.md (4 B); removed c"
    assert workspace_changes(after, after) == ""


def test_the_user_sees_which_of_the_files_it_asked_for_are_missing() -> None:
    """A checkable intent's check paths, as the user would see them in the workspace: the
    simulator is told which requested files are missing (it called sessions a success whose
    files did not exist), never the checks' verdict."""
    intent = IntentRecord.from_dict(
        {
            **_intent().to_dict(),
            "checks": [
                {"kind": "equals", "path": "notes.txt", "text": "x"},
                {"kind": "lines", "path": "a/README.md", "text": "y"},
                {"kind": "json_key", "path": "a/README.md", "text": "z"},
                {"kind": "absent", "path": "old.log", "text": ""},
            ],
        }
    )
    after = {"a/README.md": [7, "h"], "old.log": [3, "g"]}
    seen = requested_files(intent, after)
    assert seen == "notes.txt MISSING; a/README.md present (7 B); old.log still there"
    assert requested_files(intent, {"notes.txt": [1, "h"]}).endswith("old.log gone")
    assert requested_files(_intent(), after) == ""  # no checks: nothing to show
    turn = AgentTurn(query="do it", reply="Done.", requested_files=seen)
    prompt = simulator_messages(intent, [turn], 5)[1]["content"]
    assert "the files you asked for, as they are now: notes.txt MISSING" in prompt


def test_report_matches_the_papers_statistics() -> None:
    trajs = [_traj(), _traj()]
    disc = [
        {
            "intent_id": "x",
            "reason": "turn_limit",
            "stats": {"simulator_generations": 20, "simulator_drifted": 0},
        }
    ]
    r = synthesis_report(
        trajs, disc, {"generated": 10, "unique": 9, "vendi": 4.5, "embedding": "tfidf"}
    )
    assert r["intents"] == {"generated": 10, "unique": 9, "vendi": 4.5, "embedding": "tfidf"}
    assert r["trajectories"] == {
        "complete": 2,
        "discarded": 1,
        "discarded_by_reason": {"turn_limit": 1},
        "success": 0,
        "by_label": {"unverified": 2},
    }
    assert r["agreement"]["sessions"] == 0 and r["agreement"]["rate"] is None
    assert r["user_turns"] == {"mean": 2.0, "median": 2.0, "max": 2.0, "total": 4.0}
    assert r["dialogue_turns"]["total"] == 12 and r["tool_calls"]["total"] == 4
    assert (r["failed_tool_calls"], r["failed_followed_by_recovery"]) == (2, 2)
    assert r["drift"] == {
        "generations": 26,
        "drifted": 2,
        "invalid": 0,
        "rate": pytest.approx(2 / 26),
        "rejected_rate": pytest.approx(2 / 26),
    }
    assert r["distinct_tools_all"] == ["bash"]


def test_report_counts_every_attempt_of_a_best_of_n_intent() -> None:
    """Best-of-n runs an intent again under the same trajectory id: a failed first attempt
    (failed.jsonl) and a verified second one (trajectories.jsonl) are two sessions, both in
    ``complete`` and in the simulator agreement; a failure also kept as a target
    (``failed_as_targets``: in both files) is one session."""

    def attempt(n: int, ok: bool) -> dict[str, Any]:
        t = _traj()
        t["attempt"] = n
        t["outcome"] = {
            **t["outcome"],
            "session_id": f"s{n}",
            "success": ok,
            "label": "success" if ok else "failed",
            "verified": 1.0 if ok else 0.0,
            "simulator_success": True,
        }
        return t

    first, second = attempt(0, False), attempt(1, True)
    assert first["id"] == second["id"]
    r = synthesis_report([second], failed=[first])
    assert r["trajectories"]["complete"] == 2
    assert r["trajectories"]["by_label"] == {"success": 1, "failed": 1}
    assert r["agreement"] == {
        "sessions": 2,
        "agree": 1,
        "rate": 0.5,
        "simulator_success_checks_failed": 1,
        "simulator_failure_checks_passed": 0,
    }
    r = synthesis_report([first, second], failed=[first])  # failed_as_targets
    assert r["trajectories"]["complete"] == 2
    # records without a session id: the id and the attempt tell sessions apart
    for t in (first, second):
        del t["outcome"]["session_id"]
    assert synthesis_report([second], failed=[first])["trajectories"]["complete"] == 2
    assert synthesis_report([first], failed=[first])["trajectories"]["complete"] == 1


def test_read_jsonl_skips_a_half_written_last_line(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_bytes(b'{"a": 1}\n{"a": 2}\n{"a": ')
    assert [o["a"] for o in read_jsonl(p)] == [1, 2]
    p.write_bytes(b'{"a": 1}\nnope\n{"a": 2}\n')
    with pytest.raises(TrajectoryError, match=":2:"):
        list(read_jsonl(p))


def test_stats_cli_writes_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "trajectories.jsonl").write_bytes(orjson.dumps(_traj()) + b"\n")
    (tmp_path / "intents.stats.json").write_text(
        json.dumps({"generated": 3, "unique": 3, "vendi": 2.5, "embedding": "tfidf"})
    )
    assert main(["stats", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["trajectories"]["complete"] == 1 and report["intents"]["unique"] == 3
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == report
    assert main(["stats", str(tmp_path / "missing")]) == 2


def test_simulate_cli_usage_errors(tmp_path: Path) -> None:
    assert main(["simulate", "--intents", str(tmp_path / "none.jsonl"), "-o", str(tmp_path)]) == 2
    intents = tmp_path / "i.jsonl"
    intents.write_bytes(orjson.dumps(_intent().to_dict()) + b"\n")
    out = str(tmp_path / "o")
    # the scripted test agent only follows the scripted simulator
    for agent, simulator in [("scripted", "llm"), ("proxy", "scripted")]:
        argv = ["simulate", "--intents", str(intents), "-o", out]
        assert main([*argv, "--agent", agent, "--simulator", simulator]) == 2, (agent, simulator)
    scripted = ["simulate", "--intents", str(intents), "-o", out, "--agent", "scripted"]
    scripted += ["--simulator", "scripted"]
    assert main([*scripted, "--attempts", "0"]) == 2  # best-of-n needs one session at least
    assert main([*scripted, "--dtype", "bf16"]) == 2  # the embedded agent's dtype


def _verified(reward: float, sim_success: bool, transcript: dict[str, Any] | None = None) -> Any:
    checks = 2
    verification = {
        "reward": reward,
        "passed": checks if reward >= 1 else 0,
        "checks": checks,
        "failed": [] if reward >= 1 else ["equals out.txt", "absent tmp.txt"],
    }
    return build_trajectory(
        _intent(),
        transcript or _transcript(),
        [{"name": "bash", "ok": True, "tool_call_id": "c1"}],
        [{"query": "q1"}, {"query": "q2"}],
        SimulatorReply(True, "", "looks done to me", sim_success),
        {"simulator_generations": 2},
        verification=verification,
    )


@pytest.mark.parametrize("sim_success", [True, False])
@pytest.mark.parametrize("reward", [0.0, 0.5, 1.0])
def test_the_checks_decide_success_whatever_the_simulator_says(
    reward: float, sim_success: bool
) -> None:
    t = _verified(reward, sim_success)
    o = t["outcome"]
    assert o["success"] is (reward == 1.0)
    assert o["label"] == ("success" if reward == 1.0 else "failed")
    assert o["simulator_success"] is sim_success and o["verified"] == reward


async def test_a_trajectory_whose_checks_fail_is_never_written_as_a_success(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """synthesize() writes a completed session whose checks failed to failed.jsonl, never to
    trajectories.jsonl (the SFT input), even when the simulator calls it a success; with
    ``failed_as_targets`` it goes to both, still labelled a failure. The sessions here are
    stand-ins (run_session replaced: no sandbox), the files and the report are real."""
    import clawrl.ise_synth.pipeline as pipeline
    from clawrl.ise_synth import SessionResult, synthesize
    from clawrl.ise_synth.testing import ScriptedUserSimulator

    intents = [_intent()]
    verdicts = {"fail": _verified(0.0, True), "pass": _verified(1.0, False)}

    async def fake_session(intent: IntentRecord, *a: Any, **kw: Any) -> SessionResult:
        t = verdicts[current]
        return SessionResult(intent.id, t, stats=t["stats"])

    monkeypatch.setattr(pipeline, "run_session", fake_session)
    sim = ScriptedUserSimulator()
    current = "fail"
    run = await synthesize(intents, sim, None, tmp_path / "a")  # type: ignore[arg-type]
    assert list(read_jsonl(run.trajectories_path)) == []
    (failed,) = list(read_jsonl(tmp_path / "a" / "failed.jsonl"))
    assert failed["outcome"]["success"] is False and failed["outcome"]["label"] == "failed"
    assert run.failed == 1 and run.report["trajectories"]["success"] == 0
    ag = run.report["agreement"]
    assert (ag["sessions"], ag["agree"], ag["simulator_success_checks_failed"]) == (1, 0, 1)
    # resumable: the failed session is done
    again = await synthesize(intents, sim, None, tmp_path / "a")  # type: ignore[arg-type]
    assert again.skipped == 1 and again.completed == 0

    run = await synthesize(
        intents,
        sim,
        None,
        tmp_path / "b",
        failed_as_targets=True,  # type: ignore[arg-type]
    )
    (kept,) = list(read_jsonl(run.trajectories_path))
    assert kept["outcome"]["success"] is False and run.report["trajectories"]["complete"] == 1

    current = "pass"
    run = await synthesize(intents, sim, None, tmp_path / "c")  # type: ignore[arg-type]
    (ok,) = list(read_jsonl(run.trajectories_path))
    assert ok["outcome"]["success"] is True and ok["outcome"]["simulator_success"] is False
    assert not (tmp_path / "c" / "failed.jsonl").exists()
    assert run.report["agreement"]["simulator_failure_checks_passed"] == 1


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "bash", "arguments": {"command": "wc -l notes.txt"}}',
        'I will run it now:\n```json\n{"name": "write_file", "arguments": {"path": "a"}}\n```',
        '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>',
        '{"arguments": {"path": "notes.txt"}, "name": "read_file"}',
        'Call: {"function": "bash", "parameters": {"command": "ls"}}',
    ],
)
def test_call_shaped_text_that_never_ran_is_not_a_success(text: str) -> None:
    """An assistant message that holds a call the parser refused (it never executed) makes the
    trajectory no success, even with every check passing; the calls it holds are counted."""
    tr = _transcript()
    tr["tools"] = [
        {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
        for n in ("bash", "read_file", "write_file")
    ]
    tr["messages"][4]["content"] = text
    t = _verified(1.0, True, tr)
    assert t["stats"]["unexecuted_calls"] == 1
    assert t["outcome"]["success"] is False and t["outcome"]["label"] == "unexecuted_call"
    # the calls in the trajectory are the executed ones only (the text stays text)
    calls = [c for m in t["messages"] for c in m.get("tool_calls", [])]
    assert [c["id"] for c in calls] == ["c1"]


@pytest.mark.parametrize(
    "text",
    [
        "Done: notes.txt has 42 lines.",
        'The config now reads {"name": "prod", "port": 80}.',
        'I set "name": "bash" in the list of shells.',
        '{"name": "unknown_tool", "arguments": {}}',  # not one of the offered tools
    ],
)
def test_ordinary_text_is_not_call_shaped(text: str) -> None:
    assert call_shaped_text(text, ["bash", "read_file", "write_file"]) is False


def test_a_call_missing_from_the_executed_log_is_not_a_success() -> None:
    """A tool call in the messages that the harness's log of executed calls lacks is counted
    as unexecuted: the trajectory is no success."""
    t = build_trajectory(
        _intent(),
        _transcript(),
        [{"name": "bash", "ok": True, "tool_call_id": "other"}],
        [{"query": "q1"}],
        SimulatorReply(True, "", "done", True),
        {},
        verification={"reward": 1.0, "passed": 1, "checks": 1, "failed": []},
    )
    assert t["stats"]["unexecuted_calls"] == 1 and t["outcome"]["success"] is False


async def test_attempts_run_an_intent_again_until_its_checks_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Best-of-n with execution filtering: an intent whose session failed its checks or was
    discarded runs again, at most ``attempts`` sessions, and stops at the first verified
    success; every session lands in its file with its attempt; a resumed call counts the
    sessions already written; runs.jsonl gives the report's yield. Sessions are stand-ins
    (run_session replaced: no sandbox); the files and the report are real."""
    import clawrl.ise_synth.pipeline as pipeline
    from clawrl.ise_synth import SessionResult, synthesize
    from clawrl.ise_synth.testing import ScriptedUserSimulator

    plan: list[str] = []

    async def fake_session(intent: IntentRecord, *a: Any, **kw: Any) -> SessionResult:
        kind = plan.pop(0)
        if kind == "discard":
            return SessionResult(intent.id, None, "turn_limit", "never completed", {})
        t = _verified(1.0 if kind == "pass" else 0.0, True)
        return SessionResult(intent.id, t, stats=t["stats"])

    monkeypatch.setattr(pipeline, "run_session", fake_session)
    sim, out = ScriptedUserSimulator(), tmp_path / "bo"
    plan[:] = ["fail", "discard"]
    run = await synthesize([_intent()], sim, None, out, attempts=2)  # type: ignore[arg-type]
    assert plan == [] and run.report["trajectories"]["success"] == 0
    assert [t["attempt"] for t in read_jsonl(out / "failed.jsonl")] == [0]
    assert [d["attempt"] for d in read_jsonl(out / "discarded.jsonl")] == [1]
    again = await synthesize([_intent()], sim, None, out, attempts=2)  # type: ignore[arg-type]
    assert again.skipped == 1  # both attempts spent
    plan[:] = ["pass", "fail"]  # a larger budget goes on from attempt 2, stops at the pass
    run = await synthesize([_intent()], sim, None, out, attempts=4)  # type: ignore[arg-type]
    assert plan == ["fail"]
    (ok,) = list(read_jsonl(run.trajectories_path))
    assert ok["attempt"] == 2 and ok["outcome"]["success"] is True
    y = run.report["yield"]
    assert (y["sessions"], y["verified"], y["sessions_per_verified"]) == (3, 1, 3.0)
    assert y["wall_s"] >= 0 and len(list(read_jsonl(out / "runs.jsonl"))) == 3
    done = await synthesize([_intent()], sim, None, out, attempts=4)  # type: ignore[arg-type]
    assert done.skipped == 1 and plan == ["fail"]  # solved: never run again
    with pytest.raises(ValueError, match="attempts"):
        await synthesize([_intent()], sim, None, out, attempts=0)  # type: ignore[arg-type]
