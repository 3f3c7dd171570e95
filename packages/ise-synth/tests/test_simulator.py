"""Stage 2: the role-locked user simulator — reply parsing, drift detection, regeneration."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any

import pytest
from clawrl.ise_synth import (
    AgentTurn,
    IntentRecord,
    IntentSampler,
    LLMUserSimulator,
    SimulatorDriftError,
    SimulatorError,
    TemplateRenderer,
    detect_drift,
    load_taxonomy,
    parse_reply,
    simulator_messages,
)
from clawrl.ise_synth.testing import ScriptedUserSimulator, scripted_queries
from hypothesis import given
from hypothesis import strategies as st


def _intent() -> IntentRecord:
    spec = IntentSampler(load_taxonomy(), seed=3).draw(0)
    return IntentRecord.from_spec(spec, TemplateRenderer().render(spec), "template")


def _json(**kw: Any) -> str:
    base = {"completed": False, "query": "", "reason": "r", "is_success": False}
    base.update(kw)
    return json.dumps(base)


@pytest.mark.parametrize(
    ("text", "tag"),
    [
        ("As an AI language model, I cannot open files.", "as-an-ai"),
        ("I have created the report in output/report.md for you.", "assistant-report"),
        ("I've updated the config as requested.", "assistant-report"),
        ("Here is the summary of the sales data:", "here-is"),
        ("Sure, here you go — the table is ready.", "assistant-opener"),
        ("How can I help you today?", "offer-help"),
        ("Done. Let me know if you need anything else!", "assistant-closer"),
        (
            '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>',
            "tool-markup",
        ),
        ('{"name": "write_file", "arguments": {"path": "a"}}', "tool-call-json"),
        ("```bash\nls -la\n```", "code-block-command"),
        ("assistant: the file is saved", "role-prefix"),
        # seen from Qwen2.5-Coder-0.5B as the simulator
        ("I'm sorry, but I can't assist with that request.", "refusal"),
        ("What would you like to do next?", "role-inversion"),
        ("What do you need to do with the data files?", "role-inversion"),
        (
            "Please provide the details about the request you would like me to handle.",
            "role-inversion",
        ),
        ("I'm ready to assist you with preparing the weekly pack.", "role-inversion"),
        ("Welcome to Marcus Bell's legal services. Please ask me for help.", "role-inversion"),
        ("The agent will start by reading data/survey.csv.", "narration"),
        ("Are you ready to start the conversation?", "narration"),
        ("next_query", "template-leak"),
        (
            "You have at most 3 more message(s). Decide: is your goal met? If not, write your "
            "next message (one small step, react to what the agent really did). Answer with "
            "the JSON object only.",
            "template-leak",
        ),
    ],
)
def test_drift_fires_on_assistant_voice_and_tool_calls(text: str, tag: str) -> None:
    assert detect_drift(text) == tag


@pytest.mark.parametrize(
    "text",
    [
        "Can you put the Q3 numbers into a CSV under output/?",
        "Hmm, the total looks wrong — I expected 1,240. Could you re-check the March rows?",
        "thx. now pls make the chart a bar chart",
        "I have a meeting at 3, so please keep the summary short.",
        "Please double-check the files you made and summarise the result.",
        "What did you write to notes.txt? I want the total, not the average.",
        "Please add up the numbers in data/agenda_numbers.txt and write the total to t.txt.",
        # near the turn instruction's wording, but a user's own request
        "Read data.json and answer with the JSON object it contains.",
        "You have at most 2 more messages before I give up, so please hurry.",
        "Is your goal met by this script? I need the totals, not the averages.",
        "I'd like you to copy inbox/summary.txt to archive/report.txt, please.",
    ],
)
def test_user_voice_is_not_drift(text: str) -> None:
    assert detect_drift(text) is None


def test_parse_reply_accepts_the_json_answer_and_rejects_the_rest() -> None:
    r = parse_reply("<think>hmm</think>\n```json\n" + _json(query=" next ") + "\n```")
    assert (r.completed, r.query, r.reason, r.is_success) == (False, "next", "r", False)
    done = parse_reply(_json(completed=True, is_success=True, query=None))
    assert done.completed and done.is_success and done.query == ""
    for bad in [
        "Sure! Next I'd like a chart.",
        "[1, 2]",
        _json(completed="yes"),
        _json(query=""),
        _json(query="x", is_success="true"),
        # the old contract's keys are not the contract
        json.dumps({"completed": False, "next_query": "x", "reason": "", "success": False}),
        "Here: " + _json(query="x"),
    ]:
        with pytest.raises(SimulatorError):
            parse_reply(bad)


@given(st.text(max_size=200))
def test_parse_reply_never_crashes(text: str) -> None:
    with contextlib.suppress(SimulatorError):
        parse_reply(text)


@dataclass
class _Msg:
    content: str


@dataclass
class _Choice:
    message: _Msg


@dataclass
class _Resp:
    choices: list[_Choice]


class _ScriptedChat:
    """A stand-in for ``openai.AsyncOpenAI`` returning scripted simulator texts (a test
    double, named as such; the real SDK path is covered by tests/test_ise_e2e.py)."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = list(texts)
        self.requests: list[dict[str, Any]] = []
        self.chat = self
        self.completions = self

    async def create(self, **kw: Any) -> _Resp:
        self.requests.append(kw)
        return _Resp([_Choice(_Msg(self.texts.pop(0)))])


async def test_assistant_voice_is_regenerated_and_counted() -> None:
    chat = _ScriptedChat(
        [
            _json(query="I have created the file output/report.md as you asked."),
            "Sure, here is what I did.",  # not JSON
            _json(query="Great — can you also add a total row?"),
        ]
    )
    sim = LLMUserSimulator(chat, "sim", max_regenerations=3)
    history = [
        AgentTurn(
            "make the report", "Done, wrote output/report.md", "added output/report.md (120 B)"
        )
    ]
    turn = await sim.respond(_intent(), history)
    assert turn.reply.query == "Great — can you also add a total row?"
    assert (turn.generations, turn.drifted, turn.invalid) == (3, 1, 1)
    assert turn.drift_reasons[0] == "assistant-report" and turn.drift_reasons[1].startswith(
        "invalid"
    )
    # the simulator saw what the agent really did
    prompt = chat.requests[0]["messages"][1]["content"]
    assert "Done, wrote output/report.md" in prompt and "added output/report.md" in prompt


async def test_a_regeneration_is_told_why_the_last_answer_was_rejected() -> None:
    """Retry with feedback: the regeneration sees its rejected answer and the reason; until
    the user asked for a check, each turn's instruction says to ask for one before ending."""
    empty = _json(query="")  # not completed, yet no query: breaks the contract
    chat = _ScriptedChat([empty, _json(query="Please double-check the totals.")])
    turn = await LLMUserSimulator(chat, "sim").respond(_intent(), [AgentTurn("q", "done")])
    assert turn.reply.query == "Please double-check the totals." and turn.invalid == 1
    first, second = (r["messages"] for r in chat.requests)
    assert "have not asked the agent to check" in first[1]["content"]
    assert second[: len(first)] == first and second[-2] == {"role": "assistant", "content": empty}
    assert second[-1]["role"] == "user" and "rejected: 'query' is empty" in second[-1]["content"]
    checked = _ScriptedChat([_json(completed=True, is_success=True)])
    done = await LLMUserSimulator(checked, "sim").respond(
        _intent(), [AgentTurn("Please check your work", "checked")]
    )
    assert done.reply.completed
    assert "have not asked" not in checked.requests[0]["messages"][1]["content"]


async def test_persistent_drift_raises_with_counts() -> None:
    chat = _ScriptedChat([_json(query="As an AI, I will now run the script.")] * 3)
    sim = LLMUserSimulator(chat, "sim", max_regenerations=2)
    with pytest.raises(SimulatorDriftError) as info:
        await sim.respond(_intent(), [AgentTurn("q", "a")])
    assert (info.value.generations, info.value.drifted) == (3, 3)
    assert info.value.reasons == ["as-an-ai"] * 3


async def test_opening_turn_may_not_complete() -> None:
    chat = _ScriptedChat(
        [_json(completed=True, is_success=True), _json(query="Hi, first step: list the files.")]
    )
    turn = await LLMUserSimulator(chat, "sim").respond(_intent(), [])
    assert turn.reply.query.startswith("Hi") and (turn.drifted, turn.invalid) == (0, 1)


def test_prompt_holds_persona_intent_and_principles() -> None:
    intent = _intent()
    msgs = simulator_messages(intent, [], 20)
    system = msgs[0]["content"]
    assert intent.intent in system and intent.persona["name"] in system
    assert intent.persona["communication_style"] in system
    for principle in (
        "Perspective lock",
        "Register matching",
        "Incremental advancement",
        "Responsive conditioning",
    ):
        assert principle in system
    assert "FIRST message" in msgs[1]["content"]


async def test_scripted_simulator_asks_one_step_per_task_then_completes() -> None:
    intent = _intent()
    queries = scripted_queries(intent)
    n_tasks = sum(len(d["tasks"]) for d in intent.domains)
    assert len(queries) == n_tasks + 1 and queries[0].startswith(intent.intent)
    sim = ScriptedUserSimulator()
    history: list[AgentTurn] = []
    for q in queries:
        turn = await sim.respond(intent, history)
        assert not turn.reply.completed and turn.reply.query == q
        history.append(AgentTurn(q, "ok"))
    final = await sim.respond(intent, history)
    assert final.reply.completed and final.reply.is_success and final.drifted == 0


async def test_bad_json_is_retried_then_the_session_is_discarded_and_counted() -> None:
    """A non-JSON / off-contract answer is regenerated; a good one after it is used (the bad
    one counted as invalid, not as role drift); K + 1 bad answers discard the session as
    ``simulator_invalid``, and the count reaches the session's stats and the report."""
    from clawrl.ise_synth import SessionConfig, synthesis_report
    from clawrl.ise_synth.execute import _SessionEnd, _SessionRun

    retry = _ScriptedChat(["{oops", _json(query="Now count the lines of notes.txt, please.")])
    turn = await LLMUserSimulator(retry, "sim").respond(_intent(), [AgentTurn("q", "a")])
    assert (turn.generations, turn.invalid, turn.drifted) == (2, 1, 0)
    assert turn.reply.query.startswith("Now count")

    bad = [
        "Sure! Next I'd like a chart.",
        '{"completed": "no", "query": "x", "reason": "", "is_success": false}',
        '```json\n{"completed": false, "query": \n```',
    ]
    sim = LLMUserSimulator(_ScriptedChat(bad), "sim", max_regenerations=2)
    with pytest.raises(SimulatorDriftError) as info:
        await sim.respond(_intent(), [AgentTurn("q", "a")])
    assert (info.value.generations, info.value.invalid, info.value.drifted) == (3, 3, 0)

    # the session: discarded with its own reason, the invalid generations in its stats
    run = _SessionRun(
        _intent(),
        LLMUserSimulator(_ScriptedChat(bad), "sim", max_regenerations=2),
        None,  # type: ignore[arg-type]  # next_query never touches the endpoint
        SessionConfig(opening="intent"),
        "t",
    )
    assert await run.next_query() == run.intent.intent  # turn 1: the intent, no simulator
    run.history.append(AgentTurn(run.intent.intent, "done"))
    with pytest.raises(_SessionEnd) as end:
        await run.next_query()
    assert end.value.reason == "simulator_invalid"
    result = run.result(end.value.reason, end.value.detail)
    assert result.trajectory is None
    assert (result.stats["simulator_invalid"], result.stats["simulator_drifted"]) == (3, 0)
    report = synthesis_report([], [result.discard_record()])
    assert report["trajectories"]["discarded_by_reason"] == {"simulator_invalid": 1}
    assert (report["drift"]["invalid"], report["drift"]["drifted"]) == (3, 0)
    assert report["drift"]["rate"] == 0.0 and report["drift"]["rejected_rate"] == 1.0


async def test_the_simulator_is_told_the_tool_calls_and_their_results() -> None:
    """What the agent did — its tool calls and their (clipped) results, read from the agent's
    transcript of the turn — is in the next simulator prompt, bounded in length."""
    import time

    from clawrl.ise_synth import SessionConfig
    from clawrl.ise_synth.execute import _SessionRun
    from clawrl.ise_synth.simulator import REPLY_CHARS, TOOL_SUMMARY_CHARS

    def call(i: int, name: str, args: str) -> dict[str, Any]:
        return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": args}}

    calls = [call(0, "bash", '{"command": "wc -l data/notes.txt"}')]
    calls += [call(i, "read_file", f'{{"path": "f{i}.txt"}}') for i in range(1, 60)]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "old query"},
        {"role": "assistant", "content": "old answer"},
        {"role": "user", "content": "count the lines"},
        {"role": "assistant", "content": "", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "c0", "content": "exit code 0\n42 data/notes.txt"},
        *[{"role": "tool", "tool_call_id": f"c{i}", "content": "x" * 5000} for i in range(1, 60)],
        {"role": "assistant", "content": "There are 42 lines. " + "y" * 9000},
    ]
    chat = _ScriptedChat([_json(query="Thanks. Please double-check the count.")])
    run = _SessionRun(
        _intent(),
        LLMUserSimulator(chat, "sim"),
        None,  # type: ignore[arg-type]
        SessionConfig(),
        "t",
    )
    run.transcript = {"messages": messages, "tool_calls": []}
    run.record_turn("count the lines", {"before": {}, "after": {"n.txt": [3, "h"]}}, time.time())
    summary = run.history[-1].tool_summary
    assert "wc -l data/notes.txt" in summary and "42 data/notes.txt" in summary
    assert "old" not in summary and "more calls" in summary  # this turn's calls, bounded
    assert len(summary) <= TOOL_SUMMARY_CHARS + 40
    await run.next_query()
    prompt = chat.requests[0]["messages"][1]["content"]
    assert "bash" in prompt and "42 data/notes.txt" in prompt and "added n.txt" in prompt
    assert len(prompt) < REPLY_CHARS + TOOL_SUMMARY_CHARS + 1000


async def test_completion_waits_for_a_request_to_check_the_work() -> None:
    """The simulator may end the session only after it asked the agent to check its work: an
    earlier ``completed`` is rejected (counted invalid) and regenerated."""
    early = _json(completed=True, is_success=True)
    ask = _json(query="Looks good — could you double-check the totals before we finish?")
    chat = _ScriptedChat([early, ask])
    turn = await LLMUserSimulator(chat, "sim").respond(_intent(), [AgentTurn("sum it", "42")])
    assert not turn.reply.completed and turn.invalid == 1
    assert "check its work" in turn.drift_reasons[0]
    done = await LLMUserSimulator(_ScriptedChat([early]), "sim").respond(
        _intent(), [AgentTurn("sum it", "42"), AgentTurn("please verify the total", "ok")]
    )
    assert done.reply.completed and done.reply.is_success
    system = simulator_messages(_intent(), [], 20)[0]["content"]
    assert '"is_success"' in system and '"query"' in system and "check its own work" in system
