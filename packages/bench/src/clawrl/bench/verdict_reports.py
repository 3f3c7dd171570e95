"""Test reports a verifier left behind, and what they prove.

A rollout is scored only when its verifier *positively* produced a result (see
``docs/verdicts.md``). For pytest, that proof is a JUnit XML report with at least one test
executed, from a run whose exit status means "tests ran" (0: all passed, 1: some failed).
Harbor and Terminal-Bench 1 verifiers run pytest through clawrl's trusted runner
(``verifier_runner/``: bash's ``BASH_ENV`` makes ``pytest`` and ``python[3] -m pytest`` go
through it), which writes into :data:`REPORT_DIR` (under the reward directory):

* ``run-<n>.json``: one per pytest run — its arguments, its exit status, the name of its
  JUnit XML report, or the ``error`` that kept pytest from starting (not installed);
* ``run-<n>.xml``: pytest's ``--junitxml`` report of that run;
* ``missing-commands``: the commands the verifier's own top-level script could not find.

:func:`runner_outcome` reads them. A CTRF report (``ctrf.json``, written by Harbor tasks'
``pytest --ctrf``) is read by :func:`ctrf_tests`.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path, PurePosixPath

__all__ = [
    "REPORT_DIR",
    "RUNNER_DIR",
    "SHADOWING_NAMES",
    "TEST_UID",
    "RunnerOutcome",
    "ctrf_tests",
    "junit_tests",
    "pytest_exit_meaning",
    "runner_env",
    "runner_files",
    "runner_outcome",
    "shadowing_entries",
]

#: The runner's directory, relative to the verifier's reward directory.
REPORT_DIR = "clawrl-pytest"
#: Where the runner lies among the verifier's files.
RUNNER_DIR = ".clawrl"
#: Names that would stand in for the runner's modules, or run at interpreter start-up.
SHADOWING_NAMES = ("pytest", "_pytest", "pluggy", "sitecustomize", "usercustomize")
#: The user (and group) the runner starts pytest as in a verifier sandbox, where the
#: verifier runs as root: one no image should use for anything else, since every process
#: of it is killed when a pytest run ends.
TEST_UID = 64999
_MAX_REPORT = 16 << 20
#: A failed test whose recorded exception is one of these could not reach its host (name
#: resolution or no route): the verifier's network, not the agent's work, failed.
_NO_NETWORK = re.compile(
    r"socket\.gaierror|Name or service not known|Temporary failure in name resolution"
    r"|Network is unreachable|Could not resolve host|No address associated with hostname"
)
_PYTEST_EXITS = {
    0: "all tests passed",
    1: "some tests failed",
    2: "pytest was interrupted",
    3: "pytest hit an internal error",
    4: "pytest was given a bad command line",
    5: "pytest collected no tests",
}


def pytest_exit_meaning(code: int) -> str:
    """Pytest's exit status in words (127: its command was not found)."""
    if code == 127:
        return "a command was not found"
    if code < 0:
        return f"pytest was killed by signal {-code}"
    return _PYTEST_EXITS.get(code, f"pytest exited with status {code}")


def _read(path: Path) -> bytes:
    if path.is_symlink() or not path.is_file():
        raise ValueError(f"{path.name} is missing or not a regular file")
    if path.stat().st_size > _MAX_REPORT:
        raise ValueError(f"{path.name} is over {_MAX_REPORT >> 20} MiB")
    return path.read_bytes()


def junit_tests(path: Path) -> dict[str, float]:
    """The executed tests of a JUnit XML report: name -> 1.0 (passed) or 0.0 (failed or
    errored); skipped tests (pytest's ``skip`` and ``xfail``) are left out.

    Raises:
        ValueError: the report is missing, too large or not JUnit XML.
    """
    return _junit(path)[0]


def _junit(path: Path) -> tuple[dict[str, float], list[str]]:
    """(tests, tests that failed because their host could not be reached)."""
    try:
        root = ET.fromstring(_read(path))
    except ET.ParseError as exc:
        raise ValueError(f"{path.name} is not XML: {exc}") from None
    if root.tag not in ("testsuites", "testsuite"):
        raise ValueError(f"{path.name} is not a JUnit report (root <{root.tag}>)")
    tests: dict[str, float] = {}
    offline: list[str] = []
    for case in root.iter("testcase"):
        kinds = {child.tag for child in case}
        if "skipped" in kinds:
            continue
        name = case.get("name") or case.get("classname") or "?"
        failed = [child for child in case if child.tag in ("failure", "error")]
        tests[name] = min(tests.get(name, 1.0), 0.0 if failed else 1.0)
        for child in failed:
            m = _NO_NETWORK.search(f"{child.get('message', '')}\n{child.text or ''}")
            if m is not None:
                offline.append(f"{name}: {m.group(0)}")
                break
    return tests, offline


def ctrf_tests(path: Path) -> dict[str, float]:
    """The executed tests of a CTRF JSON report (``results.tests[*].name/status``): name ->
    1.0 (``passed``) or 0.0 (``failed``); ``skipped``, ``pending`` and ``other`` are left
    out.

    Raises:
        ValueError: the report is missing, too large or not CTRF.
    """
    try:
        data = json.loads(_read(path))
        cases = data["results"]["tests"]
        if not isinstance(cases, list):
            raise TypeError("results.tests is not a list")
        tests: dict[str, float] = {}
        for case in cases:
            status = case.get("status")
            if status not in ("passed", "failed"):
                continue
            name = str(case.get("name", "?"))
            tests[name] = min(tests.get(name, 1.0), 1.0 if status == "passed" else 0.0)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path.name} is not a CTRF report: {exc}") from None
    return tests


@dataclass(frozen=True)
class RunnerOutcome:
    """What the trusted runner's files prove.

    Attributes:
        runs: how many pytest runs went through the runner.
        tests: every executed test of every run: name -> 1.0 passed, 0.0 failed.
        problems: why some run proves nothing (pytest not installed, an exit status other
            than 0 or 1, a missing or broken report, no test executed), one line each.
        missing_commands: commands the verifier's top-level script could not find.
        offline: failed tests whose recorded exception says that a host could not be
            reached (name resolution, no route): ``"test: sign"`` each.
    """

    runs: int = 0
    tests: dict[str, float] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    missing_commands: tuple[str, ...] = ()
    offline: tuple[str, ...] = ()

    def reason(self) -> str | None:
        """Why these files prove no verdict, or ``None`` when they prove one (at least one
        run, every run exited 0 or 1 with a report, at least one test executed)."""
        parts: list[str] = []
        if self.missing_commands:
            parts.append("command not found: " + ", ".join(self.missing_commands[:5]))
        if self.offline:
            parts.append("no network for the tests: " + "; ".join(self.offline[:3]))
        parts.extend(self.problems[:3])
        if not parts and self.runs == 0:
            parts.append("no test report: pytest never ran through clawrl's runner")
        elif not parts and not self.tests:
            parts.append("no test was executed")
        return "; ".join(parts) or None

    @property
    def reward(self) -> float:
        """1.0 iff at least one test was executed and every executed test passed."""
        return 1.0 if self.tests and all(v == 1.0 for v in self.tests.values()) else 0.0


def runner_outcome(reward_dir: Path) -> RunnerOutcome:
    """Read the trusted runner's files under ``reward_dir`` (see the module docstring)."""
    base = reward_dir / REPORT_DIR
    missing: list[str] = []
    path = base / "missing-commands"
    if path.is_file() and not path.is_symlink():
        text = path.read_bytes()[:65536].decode("utf-8", "backslashreplace")
        missing = list(dict.fromkeys(line.strip() for line in text.splitlines() if line.strip()))
    if not base.is_dir() or base.is_symlink():
        return RunnerOutcome(missing_commands=tuple(missing))
    tests: dict[str, float] = {}
    offline: list[str] = []
    problems: list[str] = []
    runs = sorted(base.glob("run-*.json"))
    for run in runs:
        try:
            record = json.loads(_read(run))
            status = record["exit"]
            if not isinstance(status, int):
                raise TypeError(f"exit {status!r}")
        except (ValueError, KeyError, TypeError) as exc:
            problems.append(f"{run.name}: unreadable ({exc})")
            continue
        if record.get("error"):
            problems.append(str(record["error"])[:200])
            continue
        if status not in (0, 1):
            problems.append(f"{pytest_exit_meaning(status)} (exit status {status})")
            continue
        try:
            found, cut_off = _junit(base / str(record.get("junit", "")))
            offline.extend(cut_off)
        except ValueError as exc:
            problems.append(f"no usable JUnit report: {exc}")
            continue
        if not found:
            problems.append("a pytest run executed no test")
        for name, value in found.items():
            tests[name] = min(tests.get(name, 1.0), value)
    return RunnerOutcome(len(runs), tests, tuple(problems), tuple(missing), tuple(offline))


def runner_files() -> dict[str, bytes]:
    """The runner's files, by their path among the verifier's files (``.clawrl/...``)."""
    pkg = resources.files("clawrl.bench").joinpath("verifier_runner")
    return {
        f"{RUNNER_DIR}/{name}": pkg.joinpath(name).read_bytes()
        for name in ("env.sh", "pytest_runner.py")
    }


def runner_env(mount_path: str, reward_mount: str) -> dict[str, str]:
    """The verifier's environment that puts the runner in place (``BASH_ENV``)."""
    base = PurePosixPath(mount_path) / RUNNER_DIR
    return {
        "BASH_ENV": str(base / "env.sh"),
        "CLAWRL_RUNNER": str(base / "pytest_runner.py"),
        "CLAWRL_REPORT_DIR": str(PurePosixPath(reward_mount) / REPORT_DIR),
    }


def shadowing_entries(workspace: Path) -> list[str]:
    """Entries at the top of ``workspace`` (the verifier's working directory, where
    ``python -m`` and ``python -c`` import from) that would stand in for the test runner's
    modules (``pytest*``, ``_pytest``, ``pluggy``) or run at interpreter start-up
    (``sitecustomize``, ``usercustomize``, ``*.pth``)."""
    found = []
    try:
        names = sorted(p.name for p in workspace.iterdir())
    except OSError:
        return []
    for name in names:
        stem = name.removesuffix(".py") if name.endswith(".py") else name
        stem = stem.split(".")[0] if name.endswith((".so", ".pyc")) else stem
        if stem in SHADOWING_NAMES or stem.startswith("pytest_") or name.endswith(".pth"):
            found.append(name)
    return found
