"""End to end: ISE stages 1–3 through real podman sandboxes and the real proxy.

Template intents (stage 1) → the ScriptedUserSimulator (a test simulator, named as such) →
the reference harness in one sandbox per session, its model the proxy's ScriptedBackend (a
test backend: predetermined, well-formed tool calls, one failing by design) → trajectories and
the statistics report. Then the same pipeline with the embedded tiny model as agent *and* as
the LLM user simulator behind the proxy.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson
import pytest
from clawrl.ise_synth import (
    IntentRecord,
    IntentSampler,
    ProxySimulatorFactory,
    SessionConfig,
    TemplateRenderer,
    generate_intents,
    load_taxonomy,
    read_jsonl,
    synthesize,
    validate_trajectory,
)
from clawrl.ise_synth.testing import ScriptedUserSimulator, scripted_agent_completions
from clawrl.proxy import EmbeddedBackend, SessionInfo, build_default_model, serve
from clawrl.proxy.testing import ScriptedBackend

pytestmark = pytest.mark.podman


def _intents(n: int, seed: int = 0) -> list[IntentRecord]:
    records, failures = generate_intents(
        IntentSampler(load_taxonomy(), seed=seed), n, TemplateRenderer()
    )
    assert failures == 0
    return records


@pytest.mark.slow
async def test_scripted_pipeline_writes_20_trajectories_with_real_tool_calls(
    tmp_path: Path,
) -> None:
    model_dir = build_default_model("byte")
    backend = ScriptedBackend.from_model_dir(model_dir)
    simulator = ScriptedUserSimulator(max_queries=2)  # 2 user turns per session (CI time)
    intents = _intents(21)

    async def script(session: SessionInfo, intent: IntentRecord) -> None:
        backend.script(
            session.session_id, scripted_agent_completions(simulator.queries_for(intent))
        )

    config = SessionConfig(max_user_turns=20, agent_max_turns=10, memory_mb=256)
    async with serve(backend, model_dir) as endpoint:
        stats = {"generated": 21, "unique": 21, "vendi": 1.0, "embedding": "tfidf"}
        run = await synthesize(
            intents[:20],
            simulator,
            endpoint,
            tmp_path / "out",
            config,
            concurrency=4,
            agent_hook=script,
            intent_stats=stats,
        )
        # resumable: a second call skips the 20 done and runs only the new one
        again = await synthesize(
            intents,
            simulator,
            endpoint,
            tmp_path / "out",
            config,
            concurrency=1,
            agent_hook=script,
        )
    assert run.completed == 20 and run.discarded == 0
    assert again.skipped == 20 and again.completed == 1
    # template intents have no checks: never a verified success, whatever the (scripted)
    # simulator says — kept apart in failed.jsonl, labelled, not in the SFT input
    assert list(read_jsonl(run.trajectories_path)) == []
    assert run.failed == 20 and again.failed == 1
    assert run.failed_path is not None
    trajs = list(read_jsonl(run.failed_path))
    assert len(trajs) == 21
    # the output loads with the `datasets` library (one schema across all lines)
    from datasets import load_dataset

    ds = load_dataset(
        "json",
        data_files=str(run.failed_path),
        split="train",
        cache_dir=str(tmp_path / "hf-cache"),
    )
    assert ds.num_rows == 21
    assert {"messages", "tools", "intent", "persona", "stats", "outcome"} <= set(ds.column_names)
    assert [len(m) for m in ds["messages"]] == [len(t["messages"]) for t in trajs]
    for t in trajs:
        validate_trajectory(t)
        queries = simulator.queries_for(IntentRecord.from_dict(t["intent"]))
        users = [m["content"] for m in t["messages"] if m["role"] == "user"]
        assert users == queries  # one user message per simulator query, in order
        tools = [m for m in t["messages"] if m["role"] == "tool"]
        # really executed in the sandbox: the failing read, then the real file content
        assert tools[0]["content"].startswith("error:")
        assert tools[2]["content"].startswith("# Context\n")
        assert any(m["content"].startswith("exit code 0") for m in tools)
        assert t["stats"]["failed_tool_calls"] == 1 and t["stats"]["recovered_failures"] == 1
        assert t["outcome"]["success"] is False and t["outcome"]["label"] == "unverified"
        assert t["outcome"]["simulator_success"] is True
        # the workspace persisted across user turns: the final check saw every step file
        last = t["outcome"]["turns"][-1]
        assert f"step{len(queries) - 1}.md" in tools[-1]["content"]
        assert "work/step1.md" in t["outcome"]["turns"][0]["workspace_changes"]
        assert last["end_reason"] == "final_answer"
        assert any("reasoning_content" in m for m in t["messages"] if m["role"] == "assistant")
    report = again.report
    assert report["trajectories"]["complete"] == 21 and report["trajectories"]["success"] == 0
    assert report["trajectories"]["by_label"] == {"unverified": 21}
    assert report["failed_tool_calls"] == 21 and report["failed_followed_by_recovery"] == 21
    assert report["user_turns"]["max"] >= report["user_turns"]["median"] >= 2
    assert report["distinct_tools_all"] == ["bash", "read_file", "write_file"]
    assert report["drift"]["rate"] == 0.0
    assert (tmp_path / "out" / "report.json").exists()


@pytest.mark.slow
async def test_embedded_model_as_agent_and_llm_simulator(tmp_path: Path) -> None:
    """The tiny random model writes garbage: the point is that the whole path runs — the
    agent through the proxy in the sandbox, the simulator through the proxy with the openai
    SDK, drift / invalid answers detected and regenerated, the session discarded and counted."""
    model_dir = build_default_model("byte")
    backend = EmbeddedBackend(model_dir)
    intents = _intents(2, seed=1)
    capture = tmp_path / "capture"
    async with serve(backend, model_dir, capture_dir=capture) as endpoint:
        factory = ProxySimulatorFactory(
            endpoint, max_regenerations=1, max_tokens=24, max_user_turns=2
        )
        try:
            run = await synthesize(
                intents,
                factory,
                endpoint,
                tmp_path / "out",
                SessionConfig(
                    max_user_turns=2,
                    agent_max_turns=2,
                    agent_max_tokens=16,
                    memory_mb=256,
                    opening="intent",  # turn 1 = the intent text: the agent runs before the
                ),  # simulator (random weights: its output will not parse) takes over
                concurrency=2,
            )
        finally:
            await factory.aclose()
    report = run.report
    assert report["trajectories"]["complete"] + report["trajectories"]["discarded"] == 2
    assert run.completed + run.discarded == 2
    discarded = list(read_jsonl(run.discarded_path))
    reasons = Counter(d["reason"] for d in discarded)
    assert set(reasons) <= {"simulator_drift", "simulator_invalid", "turn_limit"}, discarded
    for d in discarded:  # the agent ran turn 1 in its sandbox before the simulator failed
        assert d["stats"]["user_turns"] >= 1
    # both really generated through the proxy: call records of 2 agent + 2 simulator sessions
    recorded = [p for p in capture.rglob("*.jsonl") if p.stat().st_size > 0]
    first = [orjson.loads(p.read_bytes().splitlines()[0]) for p in recorded]
    kinds = Counter("agent" if r["request"].get("tools") else "simulator" for r in first)
    assert kinds == {"agent": 2, "simulator": 2}, kinds
    # the simulator really generated (through the proxy) and its bad answers were counted
    assert report["drift"]["generations"] >= 2
    assert report["drift"]["drifted"] + report["drift"]["invalid"] >= 1


@pytest.mark.slow
async def test_checkable_intents_are_verified_in_the_sandbox(tmp_path: Path) -> None:
    """Checkable intents seed their workspace files, and the checks run in the session's
    sandbox when it ends: a scripted test agent that runs the intent's oracle script gets
    ``outcome.verified == 1.0``, one that only answers gets 0.0 with the failed checks named.
    Single-turn (the paper's ablation): one user message, the intent itself, no simulator;
    success is the verification. Multi-turn: the scripted simulator's queries, verified too."""
    from clawrl.ise_synth import generate_checkable_intents
    from clawrl.proxy import format_assistant_text as fmt

    model_dir = build_default_model("byte")
    backend = ScriptedBackend.from_model_dir(model_dir)
    intents = generate_checkable_intents(3, seed=5, split="train")
    solve = {intents[0].id, intents[2].id}  # intents[1]'s agent does nothing

    async def script(session: SessionInfo, intent: IntentRecord) -> None:
        steps = []
        if intent.id in solve:
            cmd = intent.extra["solution"]
            steps.append(fmt(tool_calls=[("bash", {"command": cmd})]))
        steps += [fmt(content="Done.")] * 4  # one final answer per user turn
        backend.script(session.session_id, steps)

    config = SessionConfig(agent_max_turns=3, memory_mb=256, single_turn=True)
    async with serve(backend, model_dir) as endpoint:
        single = await synthesize(
            intents, ScriptedUserSimulator(), endpoint, tmp_path / "1t", config,
            concurrency=2, agent_hook=script,
        )  # fmt: skip
        multi = await synthesize(
            intents[:2], ScriptedUserSimulator(max_queries=2), endpoint, tmp_path / "mt",
            SessionConfig(agent_max_turns=3, memory_mb=256), agent_hook=script,
        )  # fmt: skip
    assert single.completed == 3 and single.discarded == 0 and single.failed == 1
    kept = list(read_jsonl(single.trajectories_path))
    assert {t["intent"]["id"] for t in kept} == solve  # the SFT input: verified only
    assert single.failed_path is not None
    by_id = {t["intent"]["id"]: t for t in [*kept, *read_jsonl(single.failed_path)]}
    for intent in intents:
        t = by_id[intent.id]
        validate_trajectory(t)
        users = [m["content"] for m in t["messages"] if m["role"] == "user"]
        assert users == [intent.intent]  # single turn: the intent text only
        v = t["outcome"]["verification"]
        assert v["checks"] == len(intent.extra["checks"])
        if intent.id in solve:
            assert t["outcome"]["verified"] == 1.0 and t["outcome"]["success"] is True
            assert v["failed"] == [] and t["stats"]["verified"] == 1.0
        else:
            assert t["outcome"]["verified"] == 0.0 and t["outcome"]["success"] is False
            assert v["passed"] < v["checks"] and v["failed"]
        assert t["stats"]["simulator_generations"] == 0
        assert t["outcome"]["simulator_success"] is None  # no simulator in the ablation
    (mt,) = list(read_jsonl(multi.trajectories_path))
    assert sum(m["role"] == "user" for m in mt["messages"]) == 2
    assert mt["outcome"]["verified"] == 1.0  # solved in the first user turn, kept after
    assert mt["outcome"]["success"] is True and mt["intent"]["id"] == intents[0].id
    # the agent that did nothing: the scripted simulator says success, the checks say no —
    # it is written to failed.jsonl only, labelled, and the disagreement is reported
    assert multi.failed_path is not None
    (mf,) = list(read_jsonl(multi.failed_path))
    assert mf["intent"]["id"] == intents[1].id and mf["outcome"]["label"] == "failed"
    assert mf["outcome"]["simulator_success"] is True and mf["outcome"]["success"] is False
    assert multi.report["agreement"] == {
        "sessions": 2,
        "agree": 1,
        "rate": 0.5,
        "simulator_success_checks_failed": 1,
        "simulator_failure_checks_passed": 0,
    }
    from datasets import load_dataset

    # each file loads on its own (one schema per file)
    rows = {}
    for name, path in (("kept", single.trajectories_path), ("failed", single.failed_path)):
        ds = load_dataset(
            "json", data_files=str(path), split="train", cache_dir=str(tmp_path / "hf" / name)
        )
        rows[name] = [o["verified"] for o in ds["outcome"]]
    assert rows == {"kept": [1.0, 1.0], "failed": [0.0]}


@pytest.mark.slow
def test_sim_embedded_plays_the_user_on_its_own_proxy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``synth simulate --sim-embedded MODEL`` serves the simulator's model in a second proxy:
    every simulator call lands there and none on the agent's proxy (each proxy's own call
    records, written through a capture directory per served proxy)."""
    import clawrl.proxy
    from clawrl.ise_synth import write_intents
    from clawrl.ise_synth.cli import main

    served: list[Path] = []
    real_serve = clawrl.proxy.serve

    def capturing_serve(*args, **kwargs):  # type: ignore[no-untyped-def]
        capture = tmp_path / f"capture{len(served)}"
        served.append(capture)
        return real_serve(*args, capture_dir=capture, **kwargs)

    monkeypatch.setattr(clawrl.proxy, "serve", capturing_serve)
    intents = tmp_path / "intents.jsonl"
    write_intents(intents, _intents(2, seed=3))
    model = str(build_default_model("byte"))
    argv = ["simulate", "--intents", str(intents), "-o", str(tmp_path / "out"), "--model", model]
    argv += ["--sim-embedded", model, "--opening", "intent", "--max-user-turns", "2"]
    argv += ["--agent-max-turns", "2", "--agent-max-tokens", "16", "--sim-max-tokens", "24"]
    argv += ["--max-regenerations", "1", "--memory-mb", "256", "--concurrency", "2"]
    assert main(argv) == 0
    assert len(served) == 2  # the agent's proxy, then the simulator's

    def kinds(capture: Path) -> Counter[str]:
        first = [
            orjson.loads(p.read_bytes().splitlines()[0])
            for p in capture.rglob("*.jsonl")
            if p.stat().st_size > 0
        ]
        return Counter("agent" if r["request"].get("tools") else "simulator" for r in first)

    assert kinds(served[0]) == {"agent": 2}, kinds(served[0])
    assert kinds(served[1]) == {"simulator": 2}, kinds(served[1])
    report = orjson.loads((tmp_path / "out" / "report.json").read_bytes())
    assert report["drift"]["generations"] >= 2  # the simulator really generated there


def test_sim_embedded_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from clawrl.ise_synth import write_intents
    from clawrl.ise_synth.cli import main

    intents = tmp_path / "intents.jsonl"
    write_intents(intents, _intents(1))
    argv = ["simulate", "--intents", str(intents), "-o", str(tmp_path / "out")]
    model = str(build_default_model("byte"))
    for extra in (
        ["--sim-embedded", model, "--simulator", "scripted", "--agent", "scripted"],
        ["--sim-embedded", model, "--sim-base-url", "http://127.0.0.1:9/v1"],
        ["--sim-embedded", str(tmp_path / "no-such-model"), "--model", model],
    ):
        capsys.readouterr()
        assert main([*argv, *extra]) == 2, extra
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "--sim-embedded" in err, err
    assert not (tmp_path / "out" / "trajectories.jsonl").exists()
