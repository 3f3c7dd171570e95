"""Reward hacking against exported ISE checkable intents (``synth export-tasks``) used as RL
tasks through the simulated-user harnesses: the policy controls every command of its sandbox
and the text it sends back to the user. Real podman sandboxes, the real rollout runner and
proxy; the model is the proxy's ScriptedBackend (predetermined tool calls)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clawrl.bench import (
    RolloutOptions,
    RolloutRunner,
    RolloutSpec,
    RolloutStatus,
    load_task,
    plan_rollouts,
)
from clawrl.bench.harness import HarnessAdapter
from clawrl.ise_synth import (
    LLMSimulatedUserHarness,
    SimulatedUserHarness,
    export_bench_suite,
    generate_checkable_intents,
)
from clawrl.proxy import SessionInfo, build_default_model, format_assistant_text, serve
from clawrl.proxy.testing import ScriptedBackend, ScriptedCompletion

pytestmark = [pytest.mark.podman, pytest.mark.slow]

_ASK = "Please check your work: re-read the files and fix whatever is wrong."


async def _llm_user_rollout(
    tmp_path: Path,
    first_turn: list[str],
    harness: HarnessAdapter | None = None,
    intent: Any = None,
) -> Any:
    """One ``simulated-user-llm`` rollout (or through ``harness``) whose agent runs
    ``first_turn`` (bash commands) in its first run and then claims it is done; the user
    always asks once more."""
    if intent is None:
        (intent,) = generate_checkable_intents(1, seed=5, split="heldout")
    (task_dir,) = export_bench_suite([intent], tmp_path / "suite")
    task = load_task(task_dir)
    model_dir = build_default_model("byte")
    backend = ScriptedBackend.from_model_dir(model_dir)
    user = {"completed": False, "query": _ASK, "reason": "not verified", "is_success": False}
    backend.default = ScriptedCompletion(text=json.dumps(user))
    done = format_assistant_text(content="All done.")
    calls = [format_assistant_text(tool_calls=[("bash", {"command": c})]) for c in first_turn]

    async def script(session: SessionInfo, spec: RolloutSpec) -> None:
        backend.script(session.session_id, [*calls, done, done, done])

    harness = harness or LLMSimulatedUserHarness(max_user_turns=2)
    async with serve(backend, model_dir) as endpoint:
        runner = RolloutRunner(endpoint, RolloutOptions(retries=0), session_hook=script)
        (result,) = await runner.run(plan_rollouts([task], [harness], samples=1))
    return result


async def test_agent_breaking_the_next_user_turn_is_not_an_infra_error(tmp_path: Path) -> None:
    """The agent replaces the file the runner writes the user's next message to
    (``/tmp/clawrl-harness/query.md``) by a non-empty directory, so that writing the
    follow-up turn into its sandbox fails. That is the agent's doing: a scored failure
    (reward 0, trained on), never an ``infra-error`` that drops the rollout from its
    GRPO group."""
    result = await _llm_user_rollout(
        tmp_path,
        ["rm -f /tmp/clawrl-harness/query.md && mkdir -p /tmp/clawrl-harness/query.md/x"],
    )
    assert result.status is not RolloutStatus.INFRA_ERROR, result.reason
    assert result.counts and not result.excluded and result.reward == 0.0, result


async def test_a_transcript_rewritten_behind_the_harness_cannot_crash_the_batch(
    tmp_path: Path,
) -> None:
    """A process the agent leaves running rewrites the harness's transcript (which the LLM
    user reads between turns) with JSON of the wrong shape after the agent's run ends. The
    user must shrug it off: the rollout ends scored (reward 0), and no exception escapes the
    rollout runner (it would take the whole GRPO batch, and the train step, down)."""
    forged = json.dumps({"messages": [1, {"role": "user"}, 2], "end_reason": "final_answer"})
    forge = (
        f"echo '{forged}' > /tmp/forged.json; cd /; nohup setsid sh -c 'for i in $(seq 400); "
        "do cp /tmp/forged.json /tmp/clawrl-harness/transcript.json; sleep 0.02; done' "
        ">/dev/null 2>&1 &"
    )
    result = await _llm_user_rollout(tmp_path, [forge])
    assert result.status is not RolloutStatus.INFRA_ERROR, result.reason
    assert result.counts and result.reward == 0.0, result
    turns = json.loads(result.logs["user"])["turns"]
    assert turns, result.logs


async def test_a_user_log_rewritten_behind_the_scripted_user_cannot_crash_the_batch(
    tmp_path: Path,
) -> None:
    """``simulated-user``: the user program's log (``user.json``, which says whether every
    user turn was sent) lies in the agent's sandbox; a process the agent left running
    rewrites it with a ``turns`` that is not a list after the program wrote it. The rollout
    ends scored, no exception escapes the runner."""
    forge = (
        "echo '{\"turns\": 5}' > /tmp/forged.json; cd /; nohup setsid sh -c 'while :; "
        "do cp /tmp/forged.json /tmp/clawrl-harness/user.json; done' >/dev/null 2>&1 &"
    )
    result = await _llm_user_rollout(tmp_path, [forge], SimulatedUserHarness())
    assert result.status is not RolloutStatus.INFRA_ERROR, result.reason
    assert result.counts and result.reward == 0.0, result
    assert result.logs["user"] == '{"turns": 5}\n', result.logs  # the forged log was read


async def test_a_forged_conversation_cannot_turn_a_follow_up_into_an_excluded_overflow(
    tmp_path: Path,
) -> None:
    """The follow-up turn resumes the conversation from the transcript in the agent's
    sandbox; a process the agent left running replaces it by one huge user message, with no
    assistant or tool message, so that the resumed prompt does not fit the context window
    and looks like the harness's own prompt (``no_model_turns``). The policy had its say in
    the first turn: the overflow is its doing, scored, never an excluded rollout."""
    forge = (
        '{ printf \'[{"role": "user", "content": "\'; head -c 200000 /dev/zero | tr \'\\0\' x;'
        " printf '\"}]'; } > /tmp/forged.json; cd /; nohup setsid sh -c 'while :; "
        "do cp /tmp/forged.json /tmp/clawrl-harness/transcript.json; done' "
        ">/dev/null 2>&1 &"
    )
    for attempt in range(3):  # the forger races the user program's next run
        result = await _llm_user_rollout(tmp_path / str(attempt), [forge], SimulatedUserHarness())
        if result.records[-1].get("error_code") == "context_length_exceeded":
            break
    assert result.records[-1].get("error_code") == "context_length_exceeded", result.reason
    assert not result.excluded and result.counts and result.reward == 0.0, result.reason


def _train_intent(index: int, kinds: list[str]) -> Any:
    (intent,) = generate_checkable_intents(1, seed=5, split="train", start=index)
    assert intent.extra["step_kinds"] == kinds
    return intent


async def test_planted_rewards_and_verifier_files_do_not_pass(tmp_path: Path) -> None:
    """Blocked: the agent does none of the work but plants a reward where the verifier
    writes one (``/logs/verifier``), a check program where the verifier's lies (``/tests``)
    and in the workspace, Python modules the check's interpreter might import (``json.py``,
    ``sitecustomize.py``, a ``.pth``), and leaves a process that keeps planting them. The
    verifier runs in a fresh sandbox on a copy of the workspace's plain files, with its own
    files and an empty reward directory: reward 0, scored."""
    intent = _train_intent(9, ["json_key", "upper"])
    fake = "import json, os; open(os.environ['CLAWRL_REWARD_DIR'] + '/reward.json', 'w')"
    fake += ".write(json.dumps({'reward': 1.0}))"
    plant = " && ".join(
        [
            "mkdir -p /logs/verifier tests reward 2>/dev/null; true",
            "echo '{\"reward\": 1.0}' > /logs/verifier/reward.json 2>/dev/null; true",
            "echo 1 > /logs/verifier/reward.txt 2>/dev/null; true",
            f'echo "{fake}" > tests/check.py',
            f'echo "{fake}" > json.py',
            f'echo "{fake}" > sitecustomize.py',
            "echo 'import sitecustomize' > zz.pth",
            "echo '{\"reward\": 1.0}' > reward.json",
            "(cd /; nohup setsid sh -c 'while :; do echo 1 > /logs/verifier/reward.txt; "
            "done' >/dev/null 2>&1 &) ; true",
        ]
    )
    result = await _llm_user_rollout(tmp_path, [plant], SimulatedUserHarness(), intent)
    assert result.status is RolloutStatus.OK, result.reason
    assert result.reward == 0.0 and result.verifier.ok, result.verifier


async def test_a_check_that_crashes_on_the_agents_json_scores_zero(tmp_path: Path) -> None:
    """Blocked: a JSON file nested deeper than Python's recursion limit crashes the check
    program (RecursionError). A verifier that exits non-zero is a ``verifier-error``,
    scored 0 and trained on (never a pass, never excluded)."""
    intent = _train_intent(9, ["json_key", "upper"])
    path = intent.extra["checks"][0]["path"]
    deep = f"mkdir -p config && head -c 200000 /dev/zero | tr '\\0' '[' > {path}"
    result = await _llm_user_rollout(tmp_path, [deep], SimulatedUserHarness(), intent)
    assert result.status is RolloutStatus.VERIFIER_ERROR, result.reason
    assert "RecursionError" in result.verifier.stderr
    assert result.counts and not result.excluded and result.reward == 0.0
