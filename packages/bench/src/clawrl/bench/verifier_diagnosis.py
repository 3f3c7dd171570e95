"""Tell a verifier that could not run from one that ran and gave a low score.

Harbor-style ``test.sh`` scripts often write ``0`` into ``reward.txt`` whenever their test
command fails, whatever the cause. A test runner that is not installed (``uvx: command not
found``, ``No module named pytest``) or a download that cannot resolve its host then looks
exactly like an agent that failed. :func:`cannot_run_reason` reads the verifier's output for
the signs of such a failure of the *verifier's own* tooling or network. For Harbor and
Terminal-Bench 1 (whose pytest runs through clawrl's trusted runner) these signs never
decide a score: :func:`verify <clawrl.bench.verify>` only adds them to the reason of a
verdict that is already a ``verifier-error`` (what proves one is in
:mod:`clawrl.bench.verdict_reports` and ``docs/verdicts.md``); for the other verifiers
(ClawGym, built-in) a sign still turns a reward below 1 into a ``verifier-error``.

The signs are chosen so that the agent's own failures are not mistaken for them:

* ``<script>: line N: <cmd>: command not found`` (bash) or ``<script>: N: <cmd>: not
  found`` (dash) where ``<script>`` lies under the verifier's mount path: the trusted test
  script itself called a missing program (a program the agent's code calls does not
  print the verifier's path);
* ``<python>: No module named <mod>`` — the interpreter's ``-m`` runner (``python3 -m
  pytest``) lacks its module; and ``ModuleNotFoundError: No module named '<mod>'`` for the
  test runners' own modules only (:data:`RUNNER_MODULES`: a missing ``'solution'`` module
  is the agent's failure); and a ``ModuleNotFoundError`` for a known third-party package
  (the ClawGym image's tables, :data:`clawrl.bench.tasks.clawgym.DEBIAN_PACKAGES` / ``PIP_PACKAGES``)
  raised by an import in a trusted file under the mount path (the checker itself imports
  ``yaml`` and the image lacks it; a module the agent was to write is never such a name);
* name resolution failures (``Could not resolve host``, ``Temporary failure in name
  resolution``, apt's ``Temporary failure resolving 'host'``, ``Name or service not
  known``, uv's ``dns error``) and ``Network is unreachable``: the verifier needs a
  network that its phase does not have.
"""

from __future__ import annotations

import re

__all__ = ["RUNNER_MODULES", "cannot_run_reason", "exit_reason"]

#: Modules of test runners: their absence means the verifier's tooling is missing.
RUNNER_MODULES: frozenset[str] = frozenset(
    {"pytest", "_pytest", "pluggy", "iniconfig", "pytest_json_ctrf", "unittest", "nose"}
)

_NOT_FOUND = re.compile(
    r"^(?P<script>/\S+?):(?: line)? \d+: (?P<cmd>[^:\n]+): (?:command )?not found\s*$",
    re.MULTILINE,
)
_NO_MODULE_M = re.compile(
    r"^(?P<python>\S*python[\d.]*): No module named (?P<mod>[\w.]+)\s*$", re.MULTILINE
)
_NO_MODULE_IMPORT = re.compile(r"No module named '(?P<mod>[\w.]+)'")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"\n]+)", line \d+', re.MULTILINE)
_NETWORK = re.compile(
    r"Could not resolve host[^\n]*|Temporary failure in name resolution[^\n]*"
    r"|Name or service not known[^\n]*|dns error[^\n]*|Network is unreachable[^\n]*"
    r"|Could not resolve '[^'\n]+'|Temporary failure resolving '[^'\n]+'",
)


def cannot_run_reason(stdout: str, stderr: str, mount_path: str) -> str | None:
    """Why the verifier could not run, read from its output; ``None`` if nothing says so.

    Args:
        stdout / stderr: the verifier's output (any length).
        mount_path: in-sandbox path of the trusted verifier files (``/tests``): a
            ``command not found`` counts only when printed for a script under it.

    Returns:
        A short reason naming the first sign found (e.g. ``"command not found: uvx
        (/tests/test.sh line 3)"``) — followed by the name-resolution failure when one
        was printed too (``", after Could not resolve host: astral.sh"``: the tool's
        installer could not reach its host) — or ``None``.
    """
    text = f"{stderr}\n{stdout}"
    base = mount_path.rstrip("/") + "/"
    m4 = _NETWORK.search(text)
    network = m4.group(0).strip()[:200] if m4 is not None else ""
    # a tool missing because its download could not reach its host: name the host too
    after = f", after {network}" if network else ""
    for m in _NOT_FOUND.finditer(text):
        if m["script"].startswith(base):
            return f"command not found: {m['cmd'].strip()} ({m.group(0).strip()}){after}"
    m2 = _NO_MODULE_M.search(text)
    if m2 is not None:
        return f"missing Python module: {m2['mod']} ({m2['python']} -m {m2['mod']}){after}"
    for m3 in _NO_MODULE_IMPORT.finditer(text):
        if m3["mod"].split(".")[0] in RUNNER_MODULES:
            return f"missing Python module: {m3['mod']} (the test runner is not installed){after}"
        frames = list(_FRAME.finditer(text, 0, m3.start()))
        trusted = frames[-1]["file"] if frames else ""
        if trusted.startswith(base) and m3["mod"].split(".")[0] in _known_packages():
            return f"missing Python module: {m3['mod']} (imported by {trusted}){after}"
    if network:
        return f"no network for the verifier: {network}"
    return None


def _known_packages() -> frozenset[str]:
    from clawrl.bench.tasks.clawgym import DEBIAN_PACKAGES, PIP_PACKAGES

    return frozenset(DEBIAN_PACKAGES) | frozenset(PIP_PACKAGES)


def exit_reason(exit_code: int | None) -> str:
    """How a verifier that did not exit 0 ended, in words (127: a command not found)."""
    if exit_code is None:
        return "did not exit (killed)"
    if exit_code == 127:
        return "exited with status 127 (a command was not found)"
    return f"exited with status {exit_code}"
