"""Records to calls: the one documented filter (``Call.from_records``)."""

from __future__ import annotations

from clawrl.prefixtree import Call


def test_from_records_keeps_only_trainable_calls_by_default() -> None:
    """The one filter from records to a tree's calls: a generated completion of a call that
    finished (``error`` / ``aborted`` calls and empty completions are not trained on)."""
    from clawrl.prefixtree import UNTRAINABLE_FINISH_REASONS, is_trainable_record

    def rec(i: int, finish: str, completion: list[int]) -> dict[str, object]:
        return {
            "call_id": f"c{i}",
            "session_id": "s",
            "seq": i,
            "prompt_ids": [1, 2],
            "completion_ids": completion,
            "completion_logprobs": [-0.5] * len(completion) if completion else None,
            "finish_reason": finish,
        }

    records = [
        rec(0, "stop", [3]),
        rec(1, "tool_calls", [4, 5]),
        rec(2, "length", [6]),
        rec(3, "error", []),
        rec(4, "aborted", [7]),
        rec(5, "stop", []),
    ]
    assert {"error", "aborted"} == UNTRAINABLE_FINISH_REASONS
    assert [is_trainable_record(r) for r in records] == [True, True, True, False, False, False]
    assert [c.call_id for c in Call.from_records(records)] == ["c0", "c1", "c2"]
    every = Call.from_records(records, trainable_only=False)
    assert [c.call_id for c in every] == [f"c{i}" for i in range(6)]
