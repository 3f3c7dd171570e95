"""Verifier sanity of the built-in suite: the oracle scores 1.0 and the untouched workspace 0.

Every task is prepared, verified untouched, solved by its oracle and verified again, in a
thread pool (the work is subprocesses / podman), once per executor; the per-task tests only
read the shared results.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from clawrl.bench import (
    CATEGORIES,
    DIFFICULTIES,
    Executor,
    LocalExecutor,
    SandboxExecutor,
    Task,
    VerifierResult,
    builtin_suite_dir,
    load_builtin_suite,
    prepare_workspace,
    run_solution,
    verify,
)

TASKS = load_builtin_suite()
IDS = [t.id for t in TASKS]


@dataclass
class Outcome:
    untouched: VerifierResult
    solve_exit: int | None
    solve_stderr: str
    oracle: VerifierResult


def _run_one(task: Task, oracle_executor: Executor, verify_executor: Executor) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="clawrl-suite-") as tmp:
        ws = prepare_workspace(task, Path(tmp) / "ws")
        untouched = verify(task, ws, verify_executor)
        solved = run_solution(task, ws, oracle_executor)
        return Outcome(
            untouched, solved.exit_code, solved.stderr, verify(task, ws, verify_executor)
        )


def _run_all(
    oracle_executor: Executor, verify_executor: Executor, workers: int
) -> dict[str, Outcome]:
    with ThreadPoolExecutor(workers) as pool:
        outs = pool.map(lambda t: _run_one(t, oracle_executor, verify_executor), TASKS)
        return dict(zip(IDS, outs, strict=True))


@pytest.fixture(scope="module")
def local_outcomes() -> dict[str, Outcome]:
    # oracles and untouched workspaces hold only task code: trusted on the host
    local = LocalExecutor(trust_workspace_code=True)
    return _run_all(local, local, workers=4)


@pytest.fixture(scope="module")
def sandbox_outcomes() -> dict[str, Outcome]:
    # The oracle is trusted task code: it runs locally; both verifications run in fresh
    # podman sandboxes whose root is the host's /usr (the environment agents get).
    return _run_all(LocalExecutor(), SandboxExecutor(), workers=6)


def _check(outcome: Outcome) -> None:
    assert outcome.untouched.ok, outcome.untouched.reason + outcome.untouched.stderr
    assert outcome.untouched.reward == 0.0, outcome.untouched.subscores
    assert outcome.solve_exit == 0, outcome.solve_stderr
    assert outcome.oracle.ok, outcome.oracle.reason + outcome.oracle.stderr
    assert outcome.oracle.reward == 1.0, outcome.oracle.subscores
    assert len(outcome.oracle.subscores) >= 2  # partial credit through named sub-scores
    assert set(outcome.oracle.subscores) == set(outcome.untouched.subscores)


@pytest.mark.parametrize("task_id", IDS)
def test_oracle_one_untouched_zero_local(task_id: str, local_outcomes: dict[str, Outcome]) -> None:
    _check(local_outcomes[task_id])


@pytest.mark.podman
@pytest.mark.slow
@pytest.mark.parametrize("task_id", IDS)
def test_oracle_one_untouched_zero_sandbox(
    task_id: str, sandbox_outcomes: dict[str, Outcome]
) -> None:
    _check(sandbox_outcomes[task_id])


def test_suite_shape() -> None:
    assert len(TASKS) >= 40
    per_category = Counter(t.category for t in TASKS)
    assert set(per_category) == set(CATEGORIES)
    assert min(per_category.values()) >= 6
    assert set(Counter(t.difficulty for t in TASKS)) == set(DIFFICULTIES)
    for task in TASKS:
        assert task.network is False
        assert task.solution is not None
        assert task.root.parent == builtin_suite_dir().resolve()
        assert task.root.name == task.id  # directory name = id (valid module path for mypy)


def test_filters() -> None:
    easy_software = load_builtin_suite(categories=["software"], difficulties=["easy"])
    assert easy_software
    assert all(t.category == "software" and t.difficulty == "easy" for t in easy_software)


def test_every_task_file_is_tracked_by_git() -> None:
    """Ignore rules (e.g. ``*.log``) must not drop task inputs from a fresh clone."""
    import subprocess

    root = builtin_suite_dir()
    probe = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--is-inside-work-tree"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        pytest.skip("not a git checkout (installed package)")
    ignored = subprocess.run(
        ["git", "-C", str(root), "ls-files", "--others", "--ignored", "--exclude-standard", "."],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert [p for p in ignored if "__pycache__" not in p] == []


# The seven tasks whose checker runs agent-written code (through the shared `run` helper).
EXECUTES_WORKSPACE_CODE = {
    "add_cli_flags",
    "fix_js_cart",
    "fix_median",
    "implement_slugify",
    "ini_parser",
    "log_rotate_script",
    "rename_function",
}


def _calls_agent_code(check_py: str) -> bool:
    """Whether a checker calls the shared helpers `run` / `py` outside their definitions."""
    body = check_py.split("\ndef frac(", 1)[1]  # the helpers are defined above `frac`
    return "run(" in body or "py(" in body


@pytest.mark.parametrize("task_id", IDS)
def test_verifier_executes_workspace_code_is_declared(task_id: str) -> None:
    """task.toml says whether the verifier runs workspace code, and it is right: a checker
    that calls the agent-code helpers declares it (so host verification refuses it)."""
    task = next(t for t in TASKS if t.id == task_id)
    source = (task.verifier.files_dir / "check.py").read_text(encoding="utf-8")
    assert _calls_agent_code(source) == (task_id in EXECUTES_WORKSPACE_CODE)
    assert task.verifier_executes_workspace_code == (task_id in EXECUTES_WORKSPACE_CODE)


def test_checkers_share_the_unprivileged_run_helper() -> None:
    """Every checker carries the same `run` helper, and it drops to the unprivileged user."""
    helpers = set()
    for task in TASKS:
        source = (task.verifier.files_dir / "check.py").read_text(encoding="utf-8")
        start = source.index("#: uid = gid of the unprivileged user")
        helpers.add(source[start : source.index("\ndef py(", start)])
    assert len(helpers) == 1
    (helper,) = helpers
    assert "user=NOBODY" in helper and "group=NOBODY" in helper and "extra_groups=[]" in helper
