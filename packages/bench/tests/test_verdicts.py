"""A verdict is proven, never inferred: Harbor and Terminal-Bench 1 verifiers run pytest
through clawrl's trusted runner, and a rollout is scored only from a reward file or a JUnit
report with an executed test. Fast: the verifiers run on the host (``LocalExecutor``
trusting these fixed workspaces) with this environment's pytest; the podman runs are in
``test_verifier_errors.py``, ``test_tb1.py`` and ``tests/security``."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from clawrl.bench import LocalExecutor, Task, VerifierStatus, load_task, verify, withhold_network
from clawrl.bench.verdict_reports import ctrf_tests, junit_tests, shadowing_entries

#: this environment's pytest first, as an image that installed it would have it
HOST = LocalExecutor(f"{Path(sys.executable).parent}:/usr/bin:/bin", trust_workspace_code=True)

_TEST_PY = """\
from pathlib import Path

def test_answer():
    assert Path("answer.txt").read_text().strip() == "42"
"""


def tb1_task(root: Path, run_tests: str, test_py: str = _TEST_PY) -> Task:
    (root / "tests").mkdir(parents=True)
    (root / "task.yaml").write_text("instruction: Write 42 into answer.txt.\n")
    (root / "run-tests.sh").write_text("#!/bin/bash\n" + textwrap.dedent(run_tests))
    (root / "tests" / "test_outputs.py").write_text(test_py)
    return load_task(root)


def harbor_task(root: Path, test_sh: str, test_py: str = _TEST_PY, toml: str = "") -> Task:
    (root / "tests").mkdir(parents=True)
    (root / "instruction.md").write_text("Write 42 into answer.txt.\n")
    (root / "task.toml").write_text('version = "1.0"\n' + toml)
    (root / "tests" / "test.sh").write_text("#!/bin/bash\n" + textwrap.dedent(test_sh))
    (root / "tests" / "test_outputs.py").write_text(test_py)
    return load_task(root)


def workspace(tmp_path: Path, files: dict[str, str]) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir(parents=True)
    for name, text in files.items():
        (ws / name).write_text(text)
    return ws


_RUN = 'python3 -m pytest "$TEST_DIR/test_outputs.py" -rA\n'


@pytest.mark.parametrize(("answer", "reward"), [("42", 1.0), ("41", 0.0)])
def test_tb1_reward_comes_from_the_junit_report(tmp_path: Path, answer: str, reward: float) -> None:
    task = tb1_task(tmp_path / "t", _RUN)
    r = verify(task, workspace(tmp_path, {"answer.txt": answer}), HOST)
    assert r.status is VerifierStatus.OK and r.reward == reward, r
    assert r.subscores == {"test_answer": reward}


def test_a_workspace_pytest_module_is_tampering(tmp_path: Path) -> None:
    """A ``pytest.py`` in the workspace (the verifier's working directory) that prints a
    passing summary used to score 1.0 under ``python3 -m pytest``."""
    fake = (
        "print('=' * 10 + ' short test summary info ' + '=' * 10)\n"
        "print('PASSED test_outputs.py::test_answer')\n"
        "print('=' * 10 + ' 1 passed in 0.01s ' + '=' * 10)\n"
    )
    task = tb1_task(tmp_path / "t", _RUN)
    r = verify(task, workspace(tmp_path, {"answer.txt": "0", "pytest.py": fake}), HOST)
    assert r.status is VerifierStatus.ERROR and r.reward == 0.0, r
    assert r.reason.startswith("tampering:") and "'pytest.py'" in r.reason, r.reason


def test_a_summary_printed_after_pytest_is_not_read(tmp_path: Path) -> None:
    """The tested code prints a passing ``-rA`` summary after pytest's own (atexit): the
    reward comes from the runner's report, not from the last lines of output."""
    test_py = _TEST_PY.replace(
        "from pathlib import Path\n",
        "from pathlib import Path\nimport atexit\n"
        "atexit.register(lambda: print('=== short test summary info ===\\n"
        "PASSED test_outputs.py::test_answer\\n=== 1 passed in 0.01s ===', flush=True))\n",
    )
    task = tb1_task(tmp_path / "t", _RUN, test_py)
    r = verify(task, workspace(tmp_path, {"answer.txt": "0"}), HOST)
    assert r.status is VerifierStatus.OK and r.reward == 0.0, r


def test_tb1_without_a_report_is_an_error(tmp_path: Path) -> None:
    """A run-tests.sh whose pytest did not go through the runner proves nothing, whatever
    it prints."""
    task = tb1_task(
        tmp_path / "t",
        "echo '=== short test summary info ==='; echo 'PASSED t.py::test_answer'\n",
    )
    r = verify(task, workspace(tmp_path, {"answer.txt": "42"}), HOST)
    assert r.status is VerifierStatus.ERROR and "no test report" in r.reason, r


def test_tb1_that_collects_no_tests_is_an_error(tmp_path: Path) -> None:
    task = tb1_task(tmp_path / "t", _RUN + "exit 0\n", "def helper():\n    pass\n")
    r = verify(task, workspace(tmp_path, {"answer.txt": "42"}), HOST)
    assert r.status is VerifierStatus.ERROR and "collected no tests" in r.reason, r


_ZERO_ON_FAILURE = """\
{command} >/dev/null 2>&1
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""


@pytest.mark.parametrize(
    ("command", "test_py", "reason"),
    [
        # the runner's command is missing (its output is silenced: no log to read)
        ("uvx pytest /tests/test_outputs.py", _TEST_PY, "command not found: uvx"),
        # pytest collects no test
        ("pytest /tests/test_outputs.py", "def helper():\n    pass\n", "collected no tests"),
        # a test cannot reach its host (an external judge)
        (
            "pytest -q --tb=no -rN /tests/test_outputs.py",
            "import socket\n\ndef test_judge():\n"
            "    socket.getaddrinfo('judge.clawrl-verdict.invalid', 443)\n",
            "no network for the tests",
        ),
    ],
    ids=["missing-command", "no-tests", "host-unreachable"],
)
def test_harbor_zero_from_a_verifier_that_could_not_run_is_an_error(
    tmp_path: Path, command: str, test_py: str, reason: str
) -> None:
    task = harbor_task(tmp_path / "t", _ZERO_ON_FAILURE.format(command=command), test_py)
    r = verify(task, workspace(tmp_path, {"answer.txt": "42"}), HOST)
    assert r.status is VerifierStatus.ERROR and r.reward == 0.0, r
    assert reason in r.reason, r.reason


def test_harbor_failed_tests_stay_a_scored_zero(tmp_path: Path) -> None:
    task = harbor_task(tmp_path / "t", _ZERO_ON_FAILURE.format(command="pytest /tests"))
    r = verify(task, workspace(tmp_path, {"answer.txt": "41"}), HOST)
    assert r.status is VerifierStatus.OK and r.reward == 0.0, r
    ok = verify(task, workspace(tmp_path / "b", {"answer.txt": "42"}), HOST)
    assert ok.status is VerifierStatus.OK and ok.reward == 1.0, ok


def test_harbor_pytest_exit_2_to_5_is_not_graded(tmp_path: Path) -> None:
    """``exit $rc`` after writing 0, with pytest's usage-error status 4: not a graded 0."""
    script = (
        "pytest --no-such-option /tests/test_outputs.py\nrc=$?\n"
        "echo 0 > /logs/verifier/reward.txt\nexit $rc\n"
    )
    r = verify(harbor_task(tmp_path / "t", script), workspace(tmp_path, {}), HOST)
    assert r.status is VerifierStatus.ERROR and "status 4" in r.reason, r


def test_withheld_network_makes_a_zero_an_error_naming_it(tmp_path: Path) -> None:
    task = harbor_task(tmp_path / "t", "echo 0 > /logs/verifier/reward.txt\n")
    assert task.network is True  # Harbor's default
    (denied,) = withhold_network([task])
    assert denied.network is False and denied.network_withheld is True
    r = verify(denied, workspace(tmp_path, {}), HOST)
    assert r.status is VerifierStatus.ERROR and "network" in r.reason, r
    # full marks need no network: kept
    full = harbor_task(tmp_path / "f", "echo 1 > /logs/verifier/reward.txt\n")
    (full,) = withhold_network([full])
    assert verify(full, workspace(tmp_path / "w", {}), HOST).reward == 1.0
    # a task that declares no network is left as it is
    off = harbor_task(tmp_path / "o", "true\n", toml="[environment]\nallow_internet = false\n")
    assert withhold_network([off]) == [off]


@pytest.mark.parametrize(
    ("toml", "network"),
    [
        ("", True),
        ("[environment]\nallow_internet = true\n", True),
        ("[environment]\nallow_internet = false\n", False),
        ('[environment]\nnetwork_mode = "none"\n', False),
        ('[environment]\nnetwork_mode = "public"\n', True),
    ],
)
def test_harbor_network_follows_the_task_with_harbor_default(
    tmp_path: Path, toml: str, network: bool
) -> None:
    assert harbor_task(tmp_path / "t", "true\n", toml=toml).network is network


def test_shadowing_entries() -> None:
    assert shadowing_entries(Path(__file__).parent / "fixtures") == []


def test_report_readers(tmp_path: Path) -> None:
    junit = tmp_path / "j.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest" tests="3">'
        '<testcase classname="t" name="a"/>'
        '<testcase classname="t" name="b"><failure message="x"/></testcase>'
        '<testcase classname="t" name="c"><skipped message="s"/></testcase>'
        "</testsuite></testsuites>"
    )
    assert junit_tests(junit) == {"a": 1.0, "b": 0.0}
    ctrf = tmp_path / "ctrf.json"
    ctrf.write_text(
        '{"results": {"tests": [{"name": "a", "status": "passed"},'
        ' {"name": "b", "status": "skipped"}]}}'
    )
    assert ctrf_tests(ctrf) == {"a": 1.0}
    for bad in ("<html/>", "not xml"):
        junit.write_text(bad)
        with pytest.raises(ValueError):
            junit_tests(junit)


_PATCH_REPORTS = """\
import _pytest.reports as r
_init = r.TestReport.__init__
def _passing(self, *a, **kw):
    _init(self, *a, **kw)
    self.outcome, self.longrepr = "passed", None
r.TestReport.__init__ = _passing
"""
_REGISTER_HOOK = """\
import gc, pytest
class Flip:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        rep = (yield).get_result()
        rep.outcome, rep.longrepr = "passed", None
for o in gc.get_objects():
    if type(o).__name__ == "Config" and hasattr(o, "pluginmanager"):
        o.pluginmanager.register(Flip(), "flip")
        break
"""


@pytest.mark.parametrize("helper", [_PATCH_REPORTS, _REGISTER_HOOK], ids=["patch", "hook"])
def test_tests_that_patch_pytest_in_process_are_caught(tmp_path: Path, helper: str) -> None:
    """A module the tests import makes every test "pass" inside pytest's own process, by
    replacing a function of pytest or by registering a hook: the runner compares pytest's
    code and plugins before and after the session."""
    test_py = "import os, sys\nsys.path.append(os.getcwd())\nimport helper  # noqa\n" + _TEST_PY
    task = tb1_task(tmp_path / "t", _RUN, test_py)
    r = verify(task, workspace(tmp_path, {"answer.txt": "0", "helper.py": helper}), HOST)
    assert r.status is VerifierStatus.ERROR and r.reward == 0.0, r
    assert "pytest's own code was changed" in r.reason, r.reason


def test_an_exit_handler_cannot_rewrite_the_report(tmp_path: Path) -> None:
    """The tested code registers an exit handler that rewrites pytest's JUnit report as
    all passing once pytest is done: pytest's process ends without running it."""
    helper = (
        "import atexit, glob, os\n"
        "def _fake():\n"
        "    for f in glob.glob(os.environ['CLAWRL_REPORT_DIR'] + '/run-*.xml'):\n"
        "        open(f, 'w').write('<testsuites><testsuite>"
        '<testcase classname="t" name="test_answer"/></testsuite></testsuites>\')\n'
        "atexit.register(_fake)\n"
    )
    test_py = "import os, sys\nsys.path.append(os.getcwd())\nimport helper  # noqa\n" + _TEST_PY
    task = tb1_task(tmp_path / "t", _RUN, test_py)
    r = verify(task, workspace(tmp_path, {"answer.txt": "0", "helper.py": helper}), HOST)
    assert r.status is VerifierStatus.OK and r.reward == 0.0, r


def test_tampering_voids_full_marks_too(tmp_path: Path) -> None:
    """A Harbor test.sh that writes 1 whatever pytest said: the runner's tampering record
    still makes the rollout a verifier-error."""
    helper = _PATCH_REPORTS
    test_py = "import os, sys\nsys.path.append(os.getcwd())\nimport helper  # noqa\n" + _TEST_PY
    script = "pytest /tests/test_outputs.py\necho 1 > /logs/verifier/reward.txt\n"
    task = harbor_task(tmp_path / "t", script, test_py)
    r = verify(task, workspace(tmp_path, {"answer.txt": "0", "helper.py": helper}), HOST)
    assert r.status is VerifierStatus.ERROR and r.reason.startswith("tampering:"), r
