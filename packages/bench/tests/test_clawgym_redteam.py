"""Red-team attacks on ClawGym sub-scores: agent-controlled text that a checker echoes
must never crash the verifier nor yield a sub-score outside [0, 1]."""

from __future__ import annotations

import math

import pytest
from clawrl.bench.tasks.clawgym import checker_subscores, last_json_value


@pytest.mark.parametrize(
    "text",
    ["[" * 100_000 + "]" * 100_000, '{"a":' * 50_000 + "1" + "}" * 50_000, "[" * 100_000],
)
def test_deeply_nested_json_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        last_json_value(text)


def test_deep_echo_before_a_real_document_is_skipped() -> None:
    text = '{"ok": 1}\n' + "[" * 100_000 + "]" * 100_000
    assert last_json_value(text) == {"ok": 1}


def test_out_of_range_values_are_not_subscores() -> None:
    data = {"a": math.nan, "b": 1e308, "c": "-0.5", "d": "nan", "e": "inf", "f": -1, "g": "2"}
    subs, notes = checker_subscores({**data, "h": [{"name": "x", "score": math.inf}]})
    assert subs == {}
    assert len(notes) == len(data) + 1


def test_many_and_huge_entries_are_bounded() -> None:
    subs, notes = checker_subscores({f"k{i}": 1 for i in range(100_000)})
    assert 0 < len(subs) < 100_000
    assert all(0.0 <= v <= 1.0 for v in subs.values())
    assert notes
