"""The learnable task family: disjoint splits, determinism, partial credit, oracle."""

from __future__ import annotations

from pathlib import Path

import pytest
from clawrl.bench import (
    Layout,
    generate_learnable_tasks,
    learnable_instances,
    prepare_workspace,
    run_solution,
    verify,
)
from hypothesis import given, settings
from hypothesis import strategies as st


def test_splits_disjoint_and_sized() -> None:
    train = learnable_instances("train", 1000, seed=0)
    held = learnable_instances("heldout", 200, seed=0)
    pairs_train = {(i.name, i.word) for i in train}
    pairs_held = {(i.name, i.word) for i in held}
    assert len(pairs_train) == 1000 and len(pairs_held) == 200
    assert not pairs_train & pairs_held


@settings(max_examples=25, deadline=None)
@given(seed_a=st.integers(0, 10_000), seed_b=st.integers(0, 10_000))
def test_splits_disjoint_for_any_seeds(seed_a: int, seed_b: int) -> None:
    train = {(i.name, i.word) for i in learnable_instances("train", 100, seed=seed_a)}
    held = {(i.name, i.word) for i in learnable_instances("heldout", 100, seed=seed_b)}
    assert not train & held


def test_deterministic_by_seed() -> None:
    a = [(i.name, i.word, i.instruction) for i in learnable_instances("train", 20, seed=7)]
    b = [(i.name, i.word, i.instruction) for i in learnable_instances("train", 20, seed=7)]
    c = [(i.name, i.word, i.instruction) for i in learnable_instances("train", 20, seed=8)]
    assert a == b and a != c
    for inst in learnable_instances("heldout", 10):
        assert inst.name in inst.instruction and inst.word in inst.instruction


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="split"):
        learnable_instances("test", 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n must be"):
        learnable_instances("train", 10**6)


def test_generated_tasks_score(tmp_path: Path) -> None:
    tasks = generate_learnable_tasks(tmp_path / "tasks", "train", n=3, seed=1)
    assert len(tasks) == 3 and all(t.layout is Layout.BUILTIN for t in tasks)
    task = tasks[0]
    name, word = task.metadata["file"], task.metadata["word"]
    assert task.metadata["split"] == "train" and task.timeouts.agent_s == 60

    ws = prepare_workspace(task, tmp_path / "ws0")
    r0 = verify(task, ws)
    assert r0.ok and r0.reward == 0.0

    (ws / name).write_text("wrong\n")
    half = verify(task, ws)
    assert half.reward == 0.5 and half.subscores == {"file_exists": 1.0, "content_correct": 0.0}

    (ws / name).write_text(f"  {word}\n")
    assert verify(task, ws).reward == 1.0

    ws2 = prepare_workspace(task, tmp_path / "ws1")
    assert run_solution(task, ws2).exit_code == 0
    assert (ws2 / name).read_text().strip() == word
    assert verify(task, ws2).reward == 1.0
