"""Checkable intents: deterministic draws, disjoint splits, and checks that the oracle passes
and the untouched workspace fails (the check program run for real, on the host)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
from pathlib import Path

import pytest
from clawrl.bench import load_task, prepare_workspace, run_solution, verify
from clawrl.ise_synth import (
    CHECK_KINDS,
    CheckableIntentGenerator,
    IntentRecord,
    check_program,
    dedup_intents,
    export_bench_suite,
    generate_checkable_intents,
    is_checkable,
    read_intents,
    write_intents,
)
from clawrl.ise_synth.cli import main
from clawrl.ise_synth.embeddings import TfidfEmbedder
from hypothesis import given, settings
from hypothesis import strategies as st


def _materialise(intent: IntentRecord, ws: Path) -> None:
    for f in intent.extra["workspace"]:
        p = ws / f["path"]
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f["content"])


def _run_checks(checks: list[dict[str, str]], ws: Path) -> dict[str, object]:
    env = {**os.environ, "CLAWRL_WORKSPACE": str(ws)}
    env.pop("CLAWRL_REWARD_DIR", None)
    res = subprocess.run(
        ["python3", "-c", check_program(checks)], env=env, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    out: dict[str, object] = json.loads(res.stdout)
    return out


def test_draws_are_deterministic_and_splits_disjoint() -> None:
    a = generate_checkable_intents(30, seed=3)
    b = generate_checkable_intents(30, seed=3)
    assert [r.to_dict() for r in a] == [r.to_dict() for r in b]
    held = generate_checkable_intents(30, seed=3, split="heldout")
    assert not {r.intent for r in a} & {r.intent for r in held}
    assert all(r.extra["split"] == "train" for r in a)
    assert all(r.extra["split"] == "heldout" and "heldout" in r.id for r in held)
    assert len({r.id for r in a + held}) == 60
    other = generate_checkable_intents(30, seed=4)
    assert [r.intent for r in other] != [r.intent for r in a]


def test_shape_follows_complexity() -> None:
    steps = {"simple": 1, "medium": 2, "complex": 3}
    for r in generate_checkable_intents(60, seed=0):
        assert is_checkable(r)
        kinds = r.extra["step_kinds"]
        assert len(kinds) == steps[r.complexity] == len(set(kinds)) == len(r.extra["steps"])
        assert all(c["kind"] in CHECK_KINDS for c in r.extra["checks"])
        assert r.domains and r.persona["name"] and r.renderer == "checkable"
        for s in r.extra["steps"]:
            assert s in r.intent
        paths = [f["path"] for f in r.extra["workspace"]]
        assert len(paths) == len(set(paths))
    with pytest.raises(ValueError, match="index"):
        CheckableIntentGenerator().draw(-1)
    with pytest.raises(ValueError, match="split"):
        CheckableIntentGenerator().draw(0, "test")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="complexity"):
        CheckableIntentGenerator(complexity_mix={"epic": 1.0})
    only_simple = CheckableIntentGenerator(complexity_mix={"simple": 1.0})
    assert {only_simple.draw(i).complexity for i in range(10)} == {"simple"}


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    index=st.integers(0, 10_000),
    split=st.sampled_from(["train", "heldout"]),
)
def test_oracle_passes_and_untouched_workspace_fails(
    tmp_path_factory: pytest.TempPathFactory, seed: int, index: int, split: str
) -> None:
    intent = CheckableIntentGenerator(seed=seed).draw(index, split)  # type: ignore[arg-type]
    untouched = tmp_path_factory.mktemp("ws")
    _materialise(intent, untouched)
    before = _run_checks(intent.extra["checks"], untouched)
    assert before["reward"] == 0.0 and before["passed"] < before["checks"]
    solved = tmp_path_factory.mktemp("ws")
    _materialise(intent, solved)
    subprocess.run(["bash", "-c", intent.extra["solution"]], cwd=solved, check=True)
    after = _run_checks(intent.extra["checks"], solved)
    assert after["reward"] == 1.0 and after["passed"] == after["checks"], after
    # the worked solution, one command at a time (as a shell tool runs it), solves it too,
    # and each step's look at its input comes before the step
    shown = tmp_path_factory.mktemp("ws")
    _materialise(intent, shown)
    demo = intent.extra["demonstration"]
    assert len(demo) == 2 * len(intent.extra["steps"]) + 1
    for command in demo:
        subprocess.run(["bash", "-c", command], cwd=shown, check=True, capture_output=True)
    assert _run_checks(intent.extra["checks"], shown)["reward"] == 1.0


def test_checks_refuse_links_escapes_and_junk(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "outside.txt").write_text("apple\n")
    (ws / "a.txt").symlink_to(tmp_path / "outside.txt")  # the right content, through a link
    out = _run_checks([{"kind": "equals", "path": "a.txt", "text": "apple"}], ws)
    assert out["reward"] == 0.0 and "outside" in str(out["failed"])
    (ws / "real.txt").write_text("apple\n")
    (ws / "b.txt").symlink_to(ws / "real.txt")  # a link inside the workspace is not the file
    out = _run_checks([{"kind": "equals", "path": "b.txt", "text": "apple"}], ws)
    assert out["reward"] == 0.0 and "symlink" in str(out["failed"])
    (ws / "d").symlink_to(tmp_path, target_is_directory=True)  # a linked directory
    out = _run_checks([{"kind": "equals", "path": "d/outside.txt", "text": "apple"}], ws)
    assert out["reward"] == 0.0 and "outside" in str(out["failed"])
    (ws / "c.json").write_text("not json")
    out = _run_checks([{"kind": "json_key", "path": "c.json", "text": '["k", "v"]'}], ws)
    assert out["reward"] == 0.0 and "not JSON" in str(out["failed"])
    (ws / "c.json").write_text('["k", "v"]')  # JSON, but not an object
    assert (
        _run_checks([{"kind": "json_key", "path": "c.json", "text": '["k", "v"]'}], ws)["reward"]
        == 0.0
    )
    (ws / "c.json").write_text('{"k": "v", "other": 1}')
    assert (
        _run_checks([{"kind": "json_key", "path": "c.json", "text": '["k", "v"]'}], ws)["reward"]
        == 1.0
    )
    assert _run_checks([], ws)["reward"] == 0.0  # no checks: never a pass
    for bad in (
        {"kind": "equals", "path": "/etc/passwd", "text": ""},
        {"kind": "equals", "path": "../x", "text": ""},
        {"kind": "regex", "path": "a", "text": ""},
        {"kind": "equals", "path": "a"},
    ):
        with pytest.raises(ValueError):
            check_program([bad])  # type: ignore[list-item]


def test_exported_suite_loads_and_scores_in_bench(tmp_path: Path) -> None:
    intents = generate_checkable_intents(6, seed=1, split="heldout")
    dirs = export_bench_suite(intents, tmp_path / "suite")
    assert [d.name for d in dirs] == [r.id for r in intents]
    for intent, d in zip(intents, dirs, strict=True):
        task = load_task(d)
        assert task.instruction.strip() == intent.intent
        assert task.metadata["family"] == "ise-checkable"
        assert task.metadata["demonstration"] == intent.extra["demonstration"]
        assert "demonstration" not in task.metadata["user"]  # the simulated user's side
        ws = prepare_workspace(task, tmp_path / f"ws-{d.name}")
        untouched = verify(task, ws)
        assert untouched.ok and untouched.reward == 0.0
        assert set(untouched.subscores) == {
            f"check_{i}" for i in range(1, len(intent.extra["checks"]) + 1)
        }
        solved_ws = prepare_workspace(task, tmp_path / f"ws2-{d.name}")
        assert run_solution(task, solved_ws).exit_code == 0
        assert verify(task, solved_ws).reward == 1.0
    plain = IntentRecord("x", "do it", {}, [{"domain": "file_io"}], [], [], "simple", "t", 0, 0)
    with pytest.raises(ValueError, match="no checks"):
        export_bench_suite([plain], tmp_path / "bad")


def test_intents_cli_checkable_and_export(tmp_path: Path) -> None:
    out = tmp_path / "held.jsonl"
    assert main(["intents", "-n", "40", "--checkable", "--split", "heldout",
                 "--embedding", "tfidf", "-o", str(out)]) == 0  # fmt: skip
    kept = list(read_intents(out))
    stats = json.loads(out.with_name("held.stats.json").read_text())
    assert stats["generated"] == 40 and stats["unique"] == len(kept) >= 30
    assert all(is_checkable(r) and r.extra["split"] == "heldout" for r in kept)
    curve = stats["vendi_curve"]
    assert [k for k, _ in curve] == [k for k in (8, 16, 32) if k < len(kept)] + [len(kept)]
    assert all(v1 <= v2 + 1e-6 for (_, v1), (_, v2) in itertools.pairwise(curve))  # grows
    suite = tmp_path / "suite"
    assert main(["export-tasks", "--intents", str(out), "-o", str(suite)]) == 0
    assert sorted(p.name for p in suite.iterdir()) == sorted(r.id for r in kept)
    assert main(["export-tasks", "--intents", str(tmp_path / "none.jsonl"), "-o", "x"]) == 2
    write_intents(tmp_path / "plain.jsonl", [IntentRecord("p", "t", {}, [{"domain": "d"}],
                  [], [], "simple", "t", 0, 0)])  # fmt: skip
    assert main(["export-tasks", "--intents", str(tmp_path / "plain.jsonl"), "-o", "x"]) == 2
    assert main(["intents", "-n", "4", "--checkable", "--renderer", "llm", "--model", "m",
                 "-o", str(tmp_path / "y.jsonl")]) == 2  # fmt: skip


def test_vendi_curve_of_a_pool() -> None:
    records = generate_checkable_intents(20, seed=0)
    kept, stats = dedup_intents(records, TfidfEmbedder())
    assert stats.vendi_curve[-1] == [len(kept), pytest.approx(stats.vendi, abs=1e-4)]
    assert stats.vendi_curve[0][0] == 8
