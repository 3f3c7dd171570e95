"""The harness-health rule (clawrl.bench.rollout_health), decided from call records and the
harness's end: each case, and the cases the policy caused (scored, never excluded)."""

from __future__ import annotations

from typing import Any

from clawrl.bench import RolloutStatus, aggregate
from clawrl.bench.metrics import ScoredRollout
from clawrl.bench.rollout_health import classify_harness_health


def _out(status: RolloutStatus, exit_code: int | None = 1, **kw: Any) -> dict[str, Any]:
    return {"status": status, "reason": "r", "exit_code": exit_code, **kw}


def _rec(seq: int, finish: str = "stop", **kw: Any) -> dict[str, Any]:
    return {"seq": seq, "finish_reason": finish, "flags": [], **kw}


def _overflow(seq: int, first_turn: bool) -> dict[str, Any]:
    flags = ["context_overflow"] + (["no_model_turns"] if first_turn else [])
    return _rec(seq, "error", error_code="context_length_exceeded", flags=flags, error="x")


def test_rules() -> None:
    """Revert tried: none possible (new module); the e2e test covers the runner's use."""
    ok, herr, to = RolloutStatus.OK, RolloutStatus.HARNESS_ERROR, RolloutStatus.TIMEOUT
    c = classify_harness_health
    # the harness's own prompt overflows: typed, excluded, whatever the exit status
    for st in (ok, herr):
        got = c(_out(st, 0), [_overflow(0, True)], needs_model=True)
        assert got["status"] is RolloutStatus.CONTEXT_OVERFLOW and got["excluded"]
    # the policy's turns filled the context: typed, but scored
    got = c(_out(herr), [_rec(0, "tool_calls"), _overflow(1, False)], needs_model=True)
    assert got["status"] is RolloutStatus.CONTEXT_OVERFLOW and not got["excluded"]
    # no model turn in the prompt, but an earlier call was answered (a resumed conversation
    # the agent rewrote between user turns): the policy had its say, scored
    got = c(_out(herr, 2), [_rec(0, "tool_calls"), _rec(1), _overflow(2, True)], needs_model=True)
    assert got["status"] is RolloutStatus.CONTEXT_OVERFLOW and not got["excluded"]
    got = c(_out(herr, 2), [_rec(0, "error"), _overflow(1, True)], needs_model=True)
    assert got["excluded"]  # nothing answered before it: still the harness's own prompt
    # an overflow the harness recovered from (an answered call after it): not an overflow
    got = c(_out(ok, 0), [_overflow(0, True), _rec(1)], needs_model=True)
    assert got["status"] is ok and not got["excluded"]
    # no model call: harness-error, excluded, also on exit 0 (never ok with 0)
    for st in (ok, herr):
        got = c(_out(st, 0), [], needs_model=True)
        assert got["status"] is herr and got["excluded"] and "no model call" in got["reason"]
    # calls made, none answered (the backend failed): harness-error, excluded
    got = c(_out(herr, 2), [_rec(0, "error")], needs_model=True)
    assert got["status"] is herr and got["excluded"]
    # killed at the timeout before any call: start-up timeout, excluded; after one: scored
    got = c(_out(to, None), [], needs_model=True)
    assert got["status"] is to and got["excluded"]
    got = c(_out(to, None), [_rec(0, "aborted")], needs_model=True)
    assert got["status"] is to and not got["excluded"]
    # the client left while the model was generating (a generation that outlasted the
    # harness's HTTP timeout): the policy's doing, scored; left before any token: excluded
    left = _rec(0, "aborted", flags=["client_left"], completion_ids=[5, 6])
    for st in (ok, herr):
        got = c(_out(st, 1), [left], needs_model=True)
        assert got["status"] is st and not got["excluded"]
    got = c(_out(herr, 1), [{**left, "completion_ids": []}], needs_model=True)
    assert got["status"] is herr and got["excluded"]
    backend_abort = _rec(0, "aborted", completion_ids=[5, 6])  # not the client: excluded
    assert c(_out(herr, 1), [backend_abort], needs_model=True)["excluded"]
    # a normal failure and the agent's own doings stay as they were
    assert not c(_out(herr), [_rec(0)], needs_model=True)["excluded"]
    refused = _out(herr, refused=True)
    assert not c(refused, [], needs_model=True)["excluded"]
    assert not c(_out(ok, 0), [], needs_model=False)["excluded"]
    for st in (RolloutStatus.INFRA_ERROR, RolloutStatus.ENV_ERROR):
        assert c(_out(st), [], needs_model=True)["status"] is st


def test_aggregate_leaves_excluded_rollouts_out_of_pass_at_k() -> None:
    """Revert tried: the ``excluded`` check in metrics._task_level — 4 scored, pass@1 1/4."""
    rs = [
        ScoredRollout(task_id="t", harness="h", reward=1.0),
        ScoredRollout(task_id="t", harness="h", reward=0.0, status="harness-error", excluded=True),
        ScoredRollout(
            task_id="t", harness="h", reward=0.0, status="context-overflow", excluded=True
        ),
        ScoredRollout(task_id="t", harness="h", reward=0.0, status="context-overflow"),
    ]
    g = aggregate(rs).by_harness["h"]
    assert g.n_scored == 2 and g.pass_at_k[1] == 0.5 and g.n_excluded == 2
    assert g.harness_error_rate == 0.25 and g.context_overflow_rate == 0.5
