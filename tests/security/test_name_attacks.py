"""File names are data: a workspace file whose name is not UTF-8 (``b"bad_\\xff\\xfe.txt"``)
reaches every writer of results as a printable, lossless string (the bytes that are not
UTF-8 as ``\\xNN``) and crashes none of them: ``bench``'s ``results.json`` and report, and
the train loop's per-step rollout log. The agent is the ``oracle`` harness of a copy of a
built-in task whose ``solve.sh`` also writes that file, run by the ``bench`` command in a
real sandbox."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from clawrl.bench import RolloutResult, builtin_suite_dir
from clawrl.bench.cli import main

pytestmark = [pytest.mark.podman, pytest.mark.slow]

BAD = "bad_\\xff\\xfe.txt"  # how the name is stored


def test_undecodable_file_name_is_stored_printable(tmp_path: Path) -> None:
    root = tmp_path / "suite" / "fix_median"
    shutil.copytree(builtin_suite_dir() / "fix_median", root)
    solve = root / "solution" / "solve.sh"
    solve.write_text(solve.read_text() + "\nprintf x > \"$(printf 'bad_\\377\\376.txt')\"\n")
    out = tmp_path / "out"
    args = ["--suite", str(root.parent), "--harness", "oracle", "--output-dir", str(out)]
    assert main([*args, "--run-id", "names"]) == 0
    [results] = out.rglob("results.json")
    doc = json.loads(results.read_text(encoding="utf-8"))
    [rollout] = doc["rollouts"]
    assert rollout["status"] == "ok" and rollout["reward"] == 1.0, rollout
    [added] = [c for c in rollout["workspace_diff"] if c["change"] == "added"]
    assert added["path"] == BAD and "+++ b/" + BAD in added["diff"]
    assert BAD in (results.parent / "report.html").read_text(encoding="utf-8")
    # the train loop's per-step rollout log of the same rollout
    log = pytest.importorskip("clawrl.rl_core.train.rollouts_log")
    trees = pytest.importorskip("clawrl.rl_core.train.trees")
    result = RolloutResult.model_validate(rollout)
    step = log.write_step_rollouts(tmp_path / "train", 1, [result], trees.BuiltTrees(), None)
    [row] = [json.loads(line) for line in step.read_text(encoding="utf-8").splitlines()]
    assert BAD in [c["path"] for c in row["workspace_diff"]]
