"""ClawGym specifics: checker JSON -> sub-scores, the import scan, and the ClawGym image."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import pytest
from clawrl.bench import (
    RolloutOptions,
    RolloutRunner,
    RolloutStatus,
    load_suite,
    load_task,
    plan_rollouts,
    verify,
)
from clawrl.bench.executors import ExecResult, ExecSpec
from clawrl.bench.tasks.clawgym import (
    checker_subscores,
    clawgym_dockerfile,
    last_json_value,
    scan_imports,
    with_clawgym_image,
)
from clawrl.bench.verify import VerifierStatus, prepare_workspace
from hypothesis import given, settings
from hypothesis import strategies as st

FIXTURES = Path(__file__).parent / "fixtures"
TABULATE = FIXTURES / "clawgym_tabulate"
WORD_STATS = FIXTURES / "clawgym_word_stats"


@pytest.mark.parametrize(
    ("data", "subs"),
    [
        # task_0000's shape: flat floats
        ({"a_exists": 1.0, "b_ok": 0.0}, {"a_exists": 1.0, "b_ok": 0.0}),
        # task_0002's shape: the checker's own total next to boolean checks
        ({"reward": 0.5, "r1": True, "r2": False}, {"r1": 1.0, "r2": 0.0}),
        ({"outer": {"x": 1, "y": {"z": False}}}, {"outer.x": 1.0, "outer.y.z": 0.0}),
        (
            {"checks": [{"name": "exists", "passed": True}, {"id": 7, "score": 0.25}]},
            {"checks.exists": 1.0, "checks.7": 0.25},
        ),
        ([True, {"name": "n", "result": "fail"}], {"checks[0]": 1.0, "checks.n": 0.0}),
        ({"s": "PASS", "t": "0.75", "u": {"ok": "yes"}}, {"s": 1.0, "t": 0.75, "u": 1.0}),
    ],
)
def test_real_checker_shapes_map_to_subscores(data: Any, subs: dict[str, float]) -> None:
    got, notes = checker_subscores(data)
    assert got == subs and notes == []


def test_entries_that_are_not_scores_are_skipped_with_a_reason() -> None:
    data = {
        "ok": True,
        "count": 7,
        "missing": None,
        "text": "see notes",
        "neg": -0.5,
        "nan": math.nan,
        "deep": {"a": {"b": {"c": {"d": {"e": 1}}}}},
    }
    subs, notes = checker_subscores(data)
    assert subs == {"ok": 1.0}
    joined = "\n".join(notes)
    for fragment in ("count: 7 is outside", "missing: NoneType", "text: text 'see notes'",
                     "neg: -0.5", "nan: nan", "nested deeper"):  # fmt: skip
        assert fragment in joined, joined
    for whole in (0.5, "x", None, True):
        assert checker_subscores(whole)[0] == {} and checker_subscores(whole)[1]


def test_last_json_value_finds_indented_output_after_other_text() -> None:
    text = 'checking...\n{\n  "a": 1,\n  "b": [true]\n}\n'
    assert last_json_value(text) == {"a": 1, "b": [True]}
    assert last_json_value('{"x": 1}\n{"y": 0}\n') == {"y": 0}
    with pytest.raises(ValueError, match="no JSON"):
        last_json_value("no json here { at all")


class CheckerExecutor:
    """Test double for the verifier run: writes checker.json, prints a reward."""

    def __init__(self, checker: str, stdout: str = "0.5\n") -> None:
        self.checker, self.stdout = checker, stdout

    def run(self, spec: ExecSpec) -> ExecResult:
        reward_dir = next(m.source for m in spec.mounts if m.target == "/logs/verifier")
        (reward_dir / "checker.json").write_text(self.checker)
        return ExecResult(exit_code=0, stdout=self.stdout, stderr="", duration_s=0.0)


def test_verify_reads_the_checker_json_leniently(tmp_path: Path) -> None:
    task = load_task(WORD_STATS)
    ws = prepare_workspace(task, tmp_path / "ws")
    nested = json.dumps({"reward": 0.5, "checks": [{"name": "a", "passed": True}], "n": 3})
    r = verify(task, ws, CheckerExecutor(nested, stdout='{"ignored": 1}\n0.5\n'))
    assert r.ok and r.reward == 0.5 and r.subscores == {"checks.a": 1.0}
    assert "n: 3 is outside" in r.subscores_note
    garbled = verify(task, ws, CheckerExecutor("Traceback (most recent call last):\n"))
    assert garbled.ok and garbled.subscores == {}
    assert "checker.json: no JSON" in garbled.subscores_note
    bad_reward = verify(task, ws, CheckerExecutor(nested, stdout="nan\n"))
    assert bad_reward.status is VerifierStatus.ERROR and "not finite" in bad_reward.reason


def _gym_task(root: Path, name: str, check: str, prompt: str, inputs: dict[str, str]) -> Path:
    task = root / name
    (task / "reward").mkdir(parents=True)
    (task / "reward" / "check.py").write_text(check)
    (task / "reward" / "reward.sh").write_text("echo 0\n")
    for rel, text in inputs.items():
        (task / "input_files" / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / "input_files" / rel).write_text(text)
    entry = {"task_id": name, "user_query": prompt, "input_mount_dir": "/root/.openclaw/workspace"}
    (task / "data_entry.json").write_text(json.dumps(entry))
    return task


def test_scan_imports_maps_third_party_names_only(tmp_path: Path) -> None:
    a = _gym_task(
        tmp_path, "a", "import json, yaml\nfrom bs4 import BeautifulSoup\n",
        "Run:\n   python -m pytest -q\nthen\nimport numpy as np\n",
        {"tools/summarize.py": "import pandas\nfrom tools import helpers\nimport compute\n",
         "tools/helpers.py": "from . import summarize\nimport os.path\n"},
    )  # fmt: skip
    b = _gym_task(
        tmp_path, "b", "def broken(:\n", "Use python3 -m venv here.", {"x.py": "import pptx"}
    )
    scan = scan_imports([a, b])
    assert scan.debian == (
        "python3-bs4", "python3-numpy", "python3-pandas", "python3-pytest", "python3-yaml",
    )  # fmt: skip
    assert scan.pip == ("python-pptx",)
    assert scan.unresolved == ("compute",)  # the agent's own module is never a download
    assert scan.unparsable == ("b/reward/check.py",)
    text = clawgym_dockerfile(scan, ["/root/.openclaw/workspace"])
    assert text.splitlines()[1] == "FROM python:3"
    assert "apt-get install" in text and "python3-pandas" in text
    assert "pip install --no-cache-dir python-pptx" in text
    assert "mkdir -p /root/.openclaw/workspace" in text


def test_a_clawgym_suite_shares_one_image(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    _gym_task(suite, "t1", "import numpy\n", "q", {})
    _gym_task(suite, "t2", "import yaml\n", "q", {})
    tasks = load_suite(suite)
    assert {t.dockerfile for t in tasks} == {tasks[0].dockerfile} and tasks[0].dockerfile
    text = tasks[0].dockerfile.read_text()
    assert "python3-numpy" in text and "python3-yaml" in text
    alone = load_task(suite / "t1")  # a task loaded alone gets the image of its own imports
    assert alone.dockerfile is not None and "python3-yaml" not in alone.dockerfile.read_text()
    assert with_clawgym_image([]) == []


@pytest.mark.podman
@pytest.mark.slow
def test_clawgym_task_runs_in_the_clawgym_image() -> None:
    """The fixture's script, checker and oracle need `tabulate` and `python`, which the
    default root lacks: in the ClawGym image the oracle scores 1 with the nested checker's
    sub-scores, the untouched workspace 0; without task images the checker cannot run."""
    task = load_task(TABULATE)
    assert task.dockerfile is not None and "python3-tabulate" in task.dockerfile.read_text()

    async def run(images: bool) -> list[Any]:
        runner = RolloutRunner(options=RolloutOptions(task_images=images), concurrency=2)
        return await runner.run(plan_rollouts([task], ["oracle", "noop"]))

    by = {r.harness: r for r in asyncio.run(run(True))}
    oracle, noop = by["oracle"], by["noop"]
    assert oracle.status is RolloutStatus.OK and oracle.reward == 1.0, oracle
    assert oracle.subscores == {"checks.table_exists": 1.0, "checks.table_matches": 1.0}
    assert oracle.verifier is not None and "details.lines: 4 is outside" in (
        oracle.verifier.subscores_note
    )
    assert noop.status is RolloutStatus.OK and noop.reward == 0.0, noop
    bare = {r.harness: r for r in asyncio.run(run(False))}
    # the default root: no `python` for the oracle, no tabulate for the checker
    assert bare["oracle"].status is RolloutStatus.HARNESS_ERROR, bare["oracle"]
    assert bare["noop"].status is RolloutStatus.VERIFIER_ERROR, bare["noop"]
    assert "tabulate" in bare["noop"].reason, bare["noop"].reason


def test_a_checker_missing_a_known_package_cannot_run() -> None:
    from clawrl.bench.verifier_diagnosis import cannot_run_reason

    mount = "/root/.openclaw/workspace/reward"

    def tb(file: str, mod: str) -> str:
        return (
            f'Traceback (most recent call last):\n  File "{file}", line 8, in <module>\n'
            f"    import {mod}\nModuleNotFoundError: No module named '{mod}'\n"
        )

    reason = cannot_run_reason("", tb(f"{mount}/check.py", "tabulate"), mount)
    assert reason == f"missing Python module: tabulate (imported by {mount}/check.py)"
    # the agent's own module missing, or an agent-written file importing a package: its failure
    assert cannot_run_reason("", tb(f"{mount}/check.py", "compute"), mount) is None
    assert cannot_run_reason("", tb("/root/.openclaw/workspace/run.py", "numpy"), mount) is None


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=30,
)


@given(_JSON)
@settings(max_examples=300, deadline=None)
def test_any_json_gives_scores_in_range_and_never_raises(data: Any) -> None:
    subs, notes = checker_subscores(data)
    assert all(isinstance(k, str) and 0.0 <= v <= 1.0 for k, v in subs.items())
    assert all(isinstance(n, str) for n in notes)
