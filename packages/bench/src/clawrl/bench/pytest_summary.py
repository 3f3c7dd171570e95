"""Terminal-Bench 1's grading: the reward read from pytest's ``-rA`` summary.

TB1 verifiers (``run-tests.sh``) write no reward: the harness parses pytest's short test
summary (``pytest -rA``) and the task is solved iff every test passed. :func:`parse_pytest_summary`
does the same on the verifier's stdout: it reads the **last** ``short test summary info``
block (pytest prints it after all test output, so lines printed earlier by the code under
test do not count) and returns reward 1.0 iff at least one test ran and none failed or
errored, with one sub-score per test (1 passed, 0 otherwise).
"""

from __future__ import annotations

import re

__all__ = ["parse_pytest_summary"]

_HEADER = re.compile(r"^=+ short test summary info =+\s*$", re.MULTILINE)
_LINE = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED)\s+(\S+)")
_FINAL = re.compile(r"^=+ .*\b(passed|failed|error|errors|no tests ran)\b.* in [\d.]+s.*=+\s*$")


def parse_pytest_summary(stdout: str) -> tuple[float, dict[str, float]]:
    """Reward and per-test sub-scores from pytest ``-rA`` output.

    ``SKIPPED`` and ``XFAIL`` tests are left out; ``XPASS`` counts as passed.

    Returns:
        ``(reward, subscores)``: reward 1.0 iff every listed test passed.

    Raises:
        ValueError: no summary block, or one that lists no test (the reason says which).
    """
    headers = list(_HEADER.finditer(stdout))
    if not headers:
        raise ValueError("no pytest short test summary (run pytest with -rA)")
    block = stdout[headers[-1].end() :].splitlines()
    subs: dict[str, float] = {}
    for line in block:
        if _FINAL.match(line):
            break
        m = _LINE.match(line.strip())
        if m is None or m[1] in ("SKIPPED", "XFAIL"):
            continue
        name = m[2].split("::", 1)[-1]
        passed = m[1] in ("PASSED", "XPASS")
        subs[name] = min(subs.get(name, 1.0), 1.0 if passed else 0.0)
    if not subs:
        raise ValueError("the pytest summary lists no test")
    return (1.0 if all(v == 1.0 for v in subs.values()) else 0.0), subs
