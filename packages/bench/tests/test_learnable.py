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

    (ws / name).write_text("0123456789\n")  # right file, nothing of the word
    part = verify(task, ws)
    assert part.subscores == {
        "file_created": 1.0,
        "name_similarity": 1.0,
        "content_similarity": 0.0,
    }
    assert part.reward == pytest.approx(2 / 3)

    (ws / name).unlink()
    near = name[:-1] + "Q"  # a near miss of the name, holding the word
    (ws / near).write_text(word)
    miss = verify(task, ws)
    assert miss.subscores["file_created"] == 1.0 and miss.subscores["content_similarity"] == 1.0
    assert 0.5 < miss.subscores["name_similarity"] < 1.0 and miss.reward < 1.0
    (ws / near).unlink()

    (ws / name).write_text(f"  {word}\n")
    assert verify(task, ws).reward == 1.0

    ws2 = prepare_workspace(task, tmp_path / "ws1")
    assert run_solution(task, ws2).exit_code == 0
    assert (ws2 / name).read_text().strip() == word
    assert verify(task, ws2).reward == 1.0


def test_exact_reward(tmp_path: Path) -> None:
    """reward="exact": 1 only when NAME holds WORD; near misses that the graded reward
    credits score 0, with the same sub-scores logged beside."""
    (task,) = generate_learnable_tasks(tmp_path / "tasks", "heldout", n=1, seed=2, reward="exact")
    name, word = task.metadata["file"], task.metadata["word"]
    ws = prepare_workspace(task, tmp_path / "ws")
    assert verify(task, ws).reward == 0.0
    (ws / name).write_text(word + "s")  # right file, content one letter off
    near = verify(task, ws)
    assert near.reward == 0.0 and near.subscores["name_similarity"] == 1.0
    assert 0.8 < near.subscores["content_similarity"] < 1.0
    (ws / name).unlink()
    (ws / ("x" + name)).write_text(word)  # right content, wrong file
    assert verify(task, ws).reward == 0.0
    (ws / ("x" + name)).unlink()
    (ws / "elsewhere").write_text(word)
    (ws / name).symlink_to("elsewhere")  # a link is not the file
    assert verify(task, ws).reward == 0.0
    (ws / name).unlink()
    (ws / name).write_text(f"\n {word}\n")
    exact = verify(task, ws)
    assert exact.reward == 1.0 and set(exact.subscores) == {
        "file_created",
        "name_similarity",
        "content_similarity",
    }
    with pytest.raises(ValueError, match="reward"):
        generate_learnable_tasks(tmp_path / "t2", "train", n=1, reward="fuzzy")  # type: ignore[arg-type]


def test_restricted_vocabulary() -> None:
    """n_names / n_words keep the first names (.txt first) and words; a pair's split is the
    same as in the full family, so a small family's held-out pairs are held out there too."""
    full_held = {(i.name, i.word) for i in learnable_instances("heldout", 1000, seed=0)}
    full_train = {(i.name, i.word) for i in learnable_instances("train", 5000, seed=0)}
    small = learnable_instances("train", 50, seed=3, n_names=8, n_words=12)
    held = learnable_instances("heldout", 10, seed=3, n_names=8, n_words=12)
    names = {i.name for i in small + held}
    words = {i.word for i in small + held}
    assert len(names) <= 8 and all(n.endswith(".txt") for n in names)
    assert len(words) <= 12
    assert not {(i.name, i.word) for i in held} & full_train
    assert not {(i.name, i.word) for i in small} & full_held
    with pytest.raises(ValueError, match="n must be"):
        learnable_instances("heldout", 96, n_names=8, n_words=12)  # only ~20 % are held out
    with pytest.raises(ValueError, match="n_names"):
        learnable_instances("train", 1, n_names=0)
    with pytest.raises(ValueError, match="n_words"):
        learnable_instances("train", 1, n_words=91)
