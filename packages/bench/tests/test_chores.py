"""The workspace-chores family: disjoint splits, the ClawGym layout, exact checkers that
resist a reward-hacking policy, and (podman) oracle 1 / untouched 0 on every template."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from clawrl.bench import (
    CHORE_TEMPLATES,
    Layout,
    RolloutRunner,
    RolloutStatus,
    chore_instances,
    generate_chore_tasks,
    load_suite,
    load_task,
    plan_rollouts,
)
from clawrl.bench.chores import ChoreInstance, write_chore_task
from clawrl.bench.chores_cli import main
from hypothesis import given, settings
from hypothesis import strategies as st


def test_splits_are_disjoint_and_follow_the_content_hash() -> None:
    train = chore_instances("train", 600, seed=0) + chore_instances("train", 300, seed=1)
    held = chore_instances("heldout", 300, seed=0) + chore_instances("heldout", 120, seed=5)
    assert {i.split for i in train} == {"train"} and {i.split for i in held} == {"heldout"}
    assert not {i.digest for i in train} & {i.digest for i in held}
    assert not {i.task_id for i in train} & {i.task_id for i in held}
    one_draw = chore_instances("train", 600, seed=0)
    assert len({i.digest for i in one_draw}) == 600  # distinct within a draw
    assert [i.template for i in one_draw[:12]] == list(CHORE_TEMPLATES) * 2


@settings(max_examples=15, deadline=None)
@given(seed_a=st.integers(0, 10_000), seed_b=st.integers(0, 10_000))
def test_splits_are_disjoint_for_any_seeds(seed_a: int, seed_b: int) -> None:
    train = {i.digest for i in chore_instances("train", 60, seed=seed_a)}
    held = {i.digest for i in chore_instances("heldout", 60, seed=seed_b)}
    assert not train & held


def test_deterministic_by_seed_and_bad_arguments() -> None:
    a = [i.task_id for i in chore_instances("heldout", 12, seed=3)]
    assert a == [i.task_id for i in chore_instances("heldout", 12, seed=3)]
    assert a != [i.task_id for i in chore_instances("heldout", 12, seed=4)]
    only = chore_instances("train", 4, templates=["config_key"])
    assert {i.template for i in only} == {"config_key"}
    with pytest.raises(ValueError, match="split"):
        chore_instances("test", 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="templates"):
        chore_instances("train", 1, templates=["nope"])
    with pytest.raises(ValueError, match="n must be"):
        chore_instances("train", -1)


def test_cli_writes_clawgym_tasks_and_rejects_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(tmp_path / "s"), "--split", "heldout", "--n", "6", "--seed", "2"]) == 0
    ids = capsys.readouterr().out.split()
    tasks = load_suite(tmp_path / "s")
    assert sorted(t.id for t in tasks) == sorted(ids) and len(ids) == 6
    assert {t.layout for t in tasks} == {Layout.CLAWGYM}
    assert {t.metadata["template"] for t in tasks} == set(CHORE_TEMPLATES)
    assert {(t.metadata["family"], t.metadata["split"]) for t in tasks} == {("chores", "heldout")}
    assert all(t.solution is not None for t in tasks)
    assert main([str(tmp_path / "s2"), "--n", "-3"]) == 2
    assert "n must be" in capsys.readouterr().err


# ------------------------------------------------------------- checker robustness
# The real check.py of generated tasks, run as the verifier runs it (python3 -I), on
# workspaces a reward-hacking policy could leave behind.


def _workspace(inst: ChoreInstance, root: Path) -> tuple[Path, Path]:
    task = root / "task"
    write_chore_task(inst, task)
    ws = root / "ws"
    for rel, text in inst.files.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)
    ws.mkdir(exist_ok=True)
    return task, ws


def _score(task: Path, ws: Path) -> int:
    run = subprocess.run(
        [sys.executable, "-I", str(task / "reward" / "check.py"), str(ws), "--reward"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr  # the checker never crashes
    return int(run.stdout.strip().splitlines()[-1])


def _solve_on_host(inst: ChoreInstance, ws: Path) -> None:
    subprocess.run(["bash", "-c", "set -euo pipefail\n" + inst.solve], cwd=ws, check=True)


def _one(template: str, seed: int = 0) -> ChoreInstance:
    return chore_instances("train", 1, seed, templates=[template])[0]


def _answer(inst: ChoreInstance) -> tuple[str, str]:
    """The answer path and a correct text for it."""
    spec = inst.spec
    if spec["kind"] == "text":
        return spec["path"], spec["expected"] + "\n"
    return spec["path"], json.dumps(spec["expected"])


@pytest.mark.parametrize("template", CHORE_TEMPLATES)
def test_checker_oracle_passes_untouched_fails(template: str, tmp_path: Path) -> None:
    inst = _one(template)
    task, ws = _workspace(inst, tmp_path)
    assert _score(task, ws) == 0
    _solve_on_host(inst, ws)
    assert _score(task, ws) == 1


@pytest.mark.parametrize("template", CHORE_TEMPLATES)
def test_demonstration_looks_solves_and_checks(template: str, tmp_path: Path) -> None:
    """The worked solution (cold-start data for any harness with a shell tool) is three
    commands: the first two leave an untouched workspace scoring 0 until the second solves
    it, the third only reads; written into data_entry.json for the loader."""
    inst = _one(template)
    task, ws = _workspace(inst, tmp_path)
    look, solve, check = inst.demonstration
    for i, command in enumerate((look, solve, check)):
        subprocess.run(["bash", "-c", command], cwd=ws, check=True, capture_output=True)
        assert _score(task, ws) == (0 if i == 0 else 1), (i, command)
    assert load_task(task).metadata["demonstration"] == inst.demonstration


Attack = Callable[[Path, str, str], None]


def _symlink_to_right_answer(ws: Path, rel: str, text: str) -> None:
    (ws / "stash").write_text(text)
    (ws / rel).unlink(missing_ok=True)
    (ws / rel).symlink_to(os.path.relpath(ws / "stash", (ws / rel).parent))


def _directory(ws: Path, rel: str, text: str) -> None:
    (ws / rel).unlink(missing_ok=True)
    (ws / rel).mkdir(parents=True)
    (ws / rel / "answer").write_text(text)


def _huge(ws: Path, rel: str, text: str) -> None:
    (ws / rel).parent.mkdir(parents=True, exist_ok=True)
    (ws / rel).write_text(text + " " * (1 << 20))  # right answer + 1 MiB of whitespace


def _fifo(ws: Path, rel: str, text: str) -> None:
    (ws / rel).parent.mkdir(parents=True, exist_ok=True)
    (ws / rel).unlink(missing_ok=True)
    os.mkfifo(ws / rel)


def _not_utf8(ws: Path, rel: str, text: str) -> None:
    (ws / rel).parent.mkdir(parents=True, exist_ok=True)
    (ws / rel).write_bytes(text.encode() + b"\xff\xfe")


def _parent_symlink(ws: Path, rel: str, text: str) -> None:
    """The answer's parent directory is a link to a real directory holding the answer."""
    parts = rel.split("/")
    if len(parts) == 1:
        pytest.skip("answer at the workspace root")
    real = ws / "elsewhere"
    real.mkdir()
    (real / parts[-1]).write_text(text)
    target = ws / parts[0]
    if target.exists():
        for p in sorted(target.rglob("*"), reverse=True):
            p.unlink() if not p.is_dir() else p.rmdir()
        target.rmdir()
    target.symlink_to("elsewhere")


ATTACKS: dict[str, Attack] = {
    "symlink": _symlink_to_right_answer,
    "directory": _directory,
    "huge": _huge,
    "fifo": _fifo,
    "not_utf8": _not_utf8,
    "parent_symlink": _parent_symlink,
}


@pytest.mark.parametrize("template", [t for t in CHORE_TEMPLATES if t != "rename_files"])
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_checker_rejects_attacks_on_answer_files(
    template: str, attack: str, tmp_path: Path
) -> None:
    inst = _one(template)
    task, ws = _workspace(inst, tmp_path)
    rel, text = _answer(inst)
    ATTACKS[attack](ws, rel, text)
    assert _score(task, ws) == 0


@pytest.mark.parametrize(
    ("template", "mutate"),
    [
        # JSON answers are compared by value with types kept
        ("csv_to_json", lambda v: json.dumps([{k: str(x) for k, x in r.items()} for r in v])),
        ("csv_to_json", lambda v: json.dumps(v[:-1])),
        ("csv_to_json", lambda v: json.dumps([*v, v[0]])),
        ("csv_to_json", lambda v: "[" * 100_000),  # nesting the decoder cannot follow
        (
            "config_key",
            lambda v: json.dumps({k: float(x) if type(x) is int else x for k, x in v.items()}),
        ),
        ("config_key", lambda v: json.dumps({**v, "extra": 1})),
        ("config_key", lambda v: json.dumps(v)[:-1] + f", {json.dumps(next(iter(v)))}: 0}}"),
        ("config_key", lambda v: json.dumps({k: x for k, x in list(v.items())[1:]})),
        ("config_key", lambda v: json.dumps({**v, next(iter(v)): float("nan")})),
    ],
)
def test_checker_json_is_exact(
    template: str, mutate: Callable[[object], str], tmp_path: Path
) -> None:
    inst = _one(template)
    task, ws = _workspace(inst, tmp_path)
    rel = inst.spec["path"]
    (ws / rel).write_text(json.dumps(inst.spec["expected"], indent=4))
    assert _score(task, ws) == 1  # formatting is free
    (ws / rel).write_text(mutate(inst.spec["expected"]))
    assert _score(task, ws) == 0


def test_checker_rename_needs_exactly_the_expected_files(tmp_path: Path) -> None:
    inst = _one("rename_files")
    folder = inst.spec["path"]
    expected: dict[str, str] = inst.spec["expected"]
    new, old = sorted(set(expected) - {Path(r).name for r in inst.files})[0], None
    for rel in inst.files:
        if Path(rel).name not in expected:
            old = Path(rel).name

    def fresh(name: str) -> tuple[Path, Path]:
        task, ws = _workspace(inst, tmp_path / name)
        _solve_on_host(inst, ws)
        assert _score(task, ws) == 1
        return task, ws

    task, ws = fresh("extra")
    (ws / folder / "extra.txt").write_text("x")
    assert _score(task, ws) == 0
    task, ws = fresh("leftover")
    assert old is not None
    (ws / folder / old).write_text(expected[new])  # the old name kept beside the new one
    assert _score(task, ws) == 0
    task, ws = fresh("content")
    (ws / folder / new).write_text("changed\n")
    assert _score(task, ws) == 0
    task, ws = fresh("link")
    (ws / "keep").write_text(expected[new])
    (ws / folder / new).unlink()
    (ws / folder / new).symlink_to("../keep")
    assert _score(task, ws) == 0
    task, ws = fresh("folder_link")
    (ws / folder).rename(ws / "real")
    (ws / folder).symlink_to("real")
    assert _score(task, ws) == 0
    task, ws = fresh("many")
    for i in range(300):
        (ws / folder / f"f{i}").write_text("")
    assert _score(task, ws) == 0


# ------------------------------------------------------------- through bench (podman)


def _attack_tasks(root: Path) -> list[Path]:
    """log_value tasks whose 'oracle' is an attack: a symlink to a file holding the right
    value (the link does not even reach the verifier's copy), and the right value followed by
    1 MiB of whitespace (reaches the checker, which refuses a file over 64 KiB)."""
    inst = _one("log_value")
    value = inst.spec["expected"]
    attacks = (
        f"printf '%s\\n' {value} > stash.txt\nln -s stash.txt answer.txt\n",
        f"{{ printf '%s\\n' {value}; head -c 1048576 /dev/zero | tr '\\0' ' '; }} > answer.txt\n",
    )
    dirs = []
    for i, solve in enumerate(attacks, 1):
        inst.solve = solve
        inst.instruction += " " * i  # another digest: another id
        write_chore_task(inst, root / inst.task_id)
        dirs.append(root / inst.task_id)
    return dirs


@pytest.mark.podman
@pytest.mark.slow
def test_every_template_oracle_scores_1_untouched_0_through_bench(tmp_path: Path) -> None:
    """One held-out instance per template through bench's rollout runner (ClawGym loader,
    ClawGym image, real podman sandboxes): the oracle harness scores 1, noop 0; the two
    attacks of :func:`_attack_tasks` score 0."""
    generate_chore_tasks(tmp_path / "suite", "heldout", len(CHORE_TEMPLATES), seed=0)
    attacks = _attack_tasks(tmp_path / "suite")
    tasks = load_suite(tmp_path / "suite")
    assert {t.layout for t in tasks} == {Layout.CLAWGYM}
    specs = [s for s in plan_rollouts(tasks, ["oracle", "noop"])
             if s.harness.name == "oracle" or s.task.root not in attacks]  # fmt: skip
    results = asyncio.run(RolloutRunner(concurrency=2).run(specs))
    got = {(r.task_id, r.harness): (r.status, r.reward) for r in results}
    for t in tasks:
        if t.root in attacks:
            assert got[(t.id, "oracle")] == (RolloutStatus.OK, 0.0), got
            continue
        assert got[(t.id, "oracle")] == (RolloutStatus.OK, 1.0), (t.id, got)
        assert got[(t.id, "noop")] == (RolloutStatus.OK, 0.0), (t.id, got)
