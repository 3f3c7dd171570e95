"""Multi-turn RL rollouts against a simulated user: the ``simulated-user`` harness through
the real rollout runner (podman sandbox, proxy). The model is the proxy's ScriptedBackend (a
test backend: predetermined tool calls). The reward is the task's execution checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from clawrl.bench import RolloutRunner, RolloutSpec, RolloutStatus, load_task, plan_rollouts
from clawrl.bench.harness import get_harness
from clawrl.ise_synth import SimulatedUserHarness, export_bench_suite, generate_checkable_intents
from clawrl.proxy import SessionInfo, build_default_model, format_assistant_text, serve
from clawrl.proxy.testing import ScriptedBackend

pytestmark = pytest.mark.podman


@pytest.mark.slow
async def test_the_reward_comes_from_the_checks_after_the_users_follow_up(
    tmp_path: Path,
) -> None:
    """Turn 1: the agent only claims it is done (the checks fail). Turn 2, the user's request
    to check the work: the 'fixer' runs the task's oracle, the 'claimer' claims again. The
    fixer's reward is 1.0 and the claimer's 0.0 — the checks decide, after the last turn."""
    (intent,) = generate_checkable_intents(1, seed=5, split="heldout")
    (task_dir,) = export_bench_suite([intent], tmp_path / "suite")
    task = load_task(task_dir)
    assert isinstance(get_harness("simulated-user"), SimulatedUserHarness)  # the entry point
    model_dir = build_default_model("byte")
    backend = ScriptedBackend.from_model_dir(model_dir)
    fix = format_assistant_text(tool_calls=[("bash", {"command": intent.extra["solution"]})])
    done = format_assistant_text(content="All done, everything is in place.")
    scripts = {0: [done, fix, format_assistant_text(content="Fixed it.")], 1: [done, done]}

    async def script(session: SessionInfo, spec: RolloutSpec) -> None:
        backend.script(session.session_id, scripts[spec.sample_index])

    async with serve(backend, model_dir) as endpoint:
        runner = RolloutRunner(endpoint, session_hook=script, concurrency=2)
        results = await runner.run(plan_rollouts([task], [SimulatedUserHarness()], samples=2))
    by_sample = {r.sample_index: r for r in results}
    for r in results:
        assert r.status is RolloutStatus.OK, (r.reason, r.stderr)
        users = [m for m in r.records[-1]["request"]["messages"] if m["role"] == "user"]
        assert len(users) == 2 and "check your work" in users[1]["content"]
    fixer, claimer = by_sample[0], by_sample[1]
    assert fixer.n_calls == 3 and fixer.reward == 1.0
    assert claimer.n_calls == 2 and claimer.reward == 0.0  # it said "done" twice


@pytest.mark.slow
async def test_an_llm_user_drives_the_follow_up_turns_and_the_checks_decide(
    tmp_path: Path,
) -> None:
    """``simulated-user-llm``: after the agent's first run the runner asks the harness for the
    next turn; its LLM user simulator — a proxy session of its own on the same endpoint,
    here the ScriptedBackend's default completion (a test backend) — answers the JSON
    contract, and its query resumes the conversation. The fixer passes the checks, the
    claimer does not, whatever the simulator's opinion; the simulator's calls are not in the
    rollout's records. A simulator that breaks its contract ends the turns: the rollout is
    scored on what the agent did."""
    import json

    from clawrl.ise_synth import LLMSimulatedUserHarness
    from clawrl.ise_synth.rl import task_intent
    from clawrl.proxy.testing import ScriptedCompletion

    (intent,) = generate_checkable_intents(1, seed=5, split="heldout")
    (task_dir,) = export_bench_suite([intent], tmp_path / "suite")
    task = load_task(task_dir)
    assert isinstance(get_harness("simulated-user-llm"), LLMSimulatedUserHarness)
    played = task_intent(task)  # the user's side from the task's metadata, no checks
    assert (played.id, played.persona, played.intent) == (intent.id, intent.persona, intent.intent)
    assert "checks" not in played.extra and "solution" not in played.extra
    model_dir = build_default_model("byte")
    backend = ScriptedBackend.from_model_dir(model_dir)
    ask = "Please check your work: re-read the files and fix whatever is wrong."
    user = {"completed": False, "query": ask, "reason": "not verified", "is_success": True}
    backend.default = ScriptedCompletion(text=json.dumps(user))
    fix = format_assistant_text(tool_calls=[("bash", {"command": intent.extra["solution"]})])
    done = format_assistant_text(content="All done, everything is in place.")
    scripts = {0: [done, fix, format_assistant_text(content="Fixed it.")], 1: [done, done]}

    async def script(session: SessionInfo, spec: RolloutSpec) -> None:
        backend.script(session.session_id, scripts[spec.sample_index])

    harness = LLMSimulatedUserHarness(max_user_turns=2)
    async with serve(backend, model_dir) as endpoint:
        runner = RolloutRunner(endpoint, session_hook=script, concurrency=2)
        results = await runner.run(plan_rollouts([task], [harness], samples=2))
        backend.default = ScriptedCompletion(text="Sure! I will check.")  # not the contract
        scripts[1] = [done, done]
        (broken,) = await runner.run(plan_rollouts([task], [harness], samples=1, seed=1))
    by_sample = {r.sample_index: r for r in results}
    for r in results:
        assert r.status is RolloutStatus.OK, (r.reason, r.stderr)
        assert {rec["session_id"] for rec in r.records} == {r.session_id}
        users = [m for m in r.records[-1]["request"]["messages"] if m["role"] == "user"]
        assert [u["content"] for u in users] == [task.instruction, ask]
        (turn,) = json.loads(r.logs["user"])["turns"][:1]
        assert turn["query"] == ask and turn["is_success"] is True
    assert by_sample[0].n_calls == 3 and by_sample[0].reward == 1.0
    assert by_sample[1].n_calls == 2 and by_sample[1].reward == 0.0
    assert not harness._users  # every rollout's user released
    assert broken.status is RolloutStatus.OK and broken.n_calls == 1 and broken.reward == 0.0
    assert json.loads(broken.logs["user"])["turns"][-1]["end"] == "simulator_failed"


def _one_llm_user_step(tmp_path: Path, rollout_extra: str = "") -> tuple[Path, list[Any]]:
    """One GRPO step of ``train`` (a subprocess) through ``simulated-user-llm`` on 2 exported
    checkable intents, the tiny byte model as policy; ``rollout_extra``: more ``[rollout]``
    lines. Returns the run folder and the step's rollout lines."""
    import subprocess
    import sys

    from clawrl.rl_core.train import read_jsonl

    intents = generate_checkable_intents(2, seed=3, split="train")
    export_bench_suite(intents, tmp_path / "suite")
    out = tmp_path / "run"
    config = tmp_path / "c.toml"
    config.write_text(
        f'[run]\nout = "{out}"\nsteps = 1\n'
        f'[tasks]\nfamily = "path"\npath = "{tmp_path / "suite"}"\ntasks_per_step = 1\n'
        '[rollout]\nharnesses = ["simulated-user-llm"]\nsamples = 2\nmax_turns = 2\n'
        f"max_tokens = 16\nconcurrency = 2\n{rollout_extra}"
        "[eval]\nenabled = false\n[logging]\nprogress = false\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "clawrl.rl_core.train_cli", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out, list(read_jsonl(out / "rollouts" / "step-0001.jsonl"))


@pytest.mark.slow
def test_train_runs_through_the_llm_user_harness(tmp_path: Path) -> None:
    """One GRPO step of ``train`` through ``simulated-user-llm`` on exported checkable intents
    (the tiny byte model as agent and, on its own proxy sessions, as user): the run ends,
    every rollout has the user's log, and the simulator's sessions are recorded apart from
    the rollouts' (never trained on)."""
    import json

    out, rollouts = _one_llm_user_step(tmp_path)
    assert len(rollouts) == 2 and {r["harness"] for r in rollouts} == {"simulated-user-llm"}
    for r in rollouts:
        assert "turns" in json.loads(r["logs"]["user"])
    lines = [ln for f in (out / "capture").rglob("*.jsonl") for ln in f.read_text().splitlines()]
    records = [json.loads(ln) for ln in lines]
    sim_sessions = {
        x["session_id"] for x in records if x["metadata"].get("harness") == "user-simulator"
    }
    assert sim_sessions and not sim_sessions & {r["session_id"] for r in rollouts}


@pytest.mark.slow
def test_train_user_model_plays_the_user_on_its_own_proxy(tmp_path: Path) -> None:
    """``rollout.user_model``: a second model, served apart, plays the simulated user. Its
    calls are recorded in ``capture-user`` only; the policy's proxy (``capture``, what is
    trained on) holds the rollouts' calls and no user-simulator session."""
    import json

    user = build_default_model("byte")
    out, rollouts = _one_llm_user_step(tmp_path, f'user_model = "{user}"\n')
    assert len(rollouts) == 2

    def harnesses(capture: Path) -> dict[str, set[str]]:
        by: dict[str, set[str]] = {}
        for f in capture.rglob("*.jsonl"):
            for ln in f.read_text().splitlines():
                x = json.loads(ln)
                by.setdefault(x["metadata"].get("harness"), set()).add(x["session_id"])
        return by

    policy, played = harnesses(out / "capture"), harnesses(out / "capture-user")
    assert "user-simulator" not in policy, policy  # no user session on the policy's proxy
    assert policy["simulated-user-llm"] == {r["session_id"] for r in rollouts}
    assert set(played) == {"user-simulator"} and len(played["user-simulator"]) == 2, played
    for r in rollouts:  # the user generated there (the tiny model fails its JSON contract),
        turns = json.loads(r["logs"]["user"])["turns"]  # not a user that could not start
        assert turns and not turns[0].get("error", "").startswith("simulator:"), turns
        assert "query" in turns[0] or turns[0].get("end") == "simulator_failed", turns
