"""clawrl's trusted pytest runner, run in the verifier's sandbox (any Python >= 3.6).

Started as ``python -I pytest_runner.py script|module ARGS`` by the verifier's bash
(``env.sh``): ``-I`` keeps the working directory, the script's directory, ``PYTHON*``
variables and the user site off ``sys.path``, so nothing in the workspace can stand in for
pytest or run at start-up (``sitecustomize``, ``usercustomize``, ``*.pth``).

It runs pytest in a child process with ``--junitxml`` into ``$CLAWRL_REPORT_DIR`` and writes
``run-<n>.json`` there: the arguments, pytest's exit status and the report's name, or why
pytest could not start. The child's ``sys.path`` is the installed packages (the user site
included), then ``PYTHONPATH``, then, for ``python -m pytest``, the working directory: a
module of the workspace is importable by the tests, never ahead of pytest's own.
"""

import json
import os
import subprocess
import sys
import time

_NO_PYTEST = 86
_PATCHED = 87
_OWN = ("pytest", "_pytest", "pluggy")


def _code() -> dict:
    """Every function and method of pytest's and pluggy's modules, by where it is bound."""
    out: dict = {}
    for name, mod in list(sys.modules.items()):
        if mod is None or name.split(".")[0] not in _OWN:
            continue
        for key, value in list(vars(mod).items()):
            if callable(value) or isinstance(value, property):
                out[(name, key)] = value
            if isinstance(value, type) and value.__module__ == name:
                for attr, member in list(vars(value).items()):
                    if callable(member) or isinstance(
                        member, (property, staticmethod, classmethod)
                    ):
                        out[(name, key, attr)] = member
    return out


class _Guard:
    """Remembers pytest's code when the session starts (before any test module, and so
    any module of the workspace, is imported) and compares it when the session ends."""

    def __init__(self) -> None:
        self.before: dict = {}
        self.changed: list = []

    def pytest_sessionstart(self, session: object) -> None:
        self.before = _code()

    def pytest_sessionfinish(self, session: object) -> None:
        after = _code()
        self.changed = sorted(
            ".".join(key) for key, value in self.before.items() if after.get(key) is not value
        )


def _report_dir() -> str:
    return os.environ.get("CLAWRL_REPORT_DIR") or "/logs/verifier/clawrl-pytest"


def _child(mode: str, junit: str, args: list) -> int:
    sys.dont_write_bytecode = True
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    try:
        import site

        user = site.getusersitepackages()
        if os.path.isdir(user):
            extra.insert(0, user)
    except Exception:  # a site module without user sites
        pass
    if mode == "module":
        extra.append(os.getcwd())
    sys.path.extend(p for p in extra if p not in sys.path)
    try:
        import pytest
    except ImportError as exc:
        sys.stderr.write(f"clawrl: pytest is not installed for {sys.executable}: {exc}\n")
        return _NO_PYTEST
    guard = _Guard()
    status = int(pytest.main(["--junitxml=" + junit, *args], plugins=[guard]))
    changed = guard.changed
    if changed:
        sys.stderr.write(
            "clawrl: pytest's own code changed while the tests ran: "
            + ", ".join(changed[:5])
            + "\n"
        )
        sys.stderr.flush()
        os._exit(_PATCHED)
    return status


def main() -> int:
    if len(sys.argv) >= 4 and sys.argv[1] == "--child":
        return _child(sys.argv[2], sys.argv[3], sys.argv[4:])
    mode, args = (sys.argv[1] if len(sys.argv) > 1 else "script"), sys.argv[2:]
    reports = _report_dir()
    os.makedirs(reports, exist_ok=True)
    n = 0
    while True:
        n += 1
        name = f"run-{n}"
        try:
            fd = os.open(
                os.path.join(reports, name + ".json"), os.O_CREAT | os.O_EXCL | os.O_WRONLY
            )
        except FileExistsError:
            continue
        break
    junit = os.path.join(reports, name + ".xml")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    started = time.time()
    argv = [sys.executable, "-I", os.path.abspath(__file__), "--child", mode, junit, *args]
    status = subprocess.call(argv, env=env)
    record = {
        "args": args,
        "mode": mode,
        "python": sys.executable,
        "exit": status,
        "junit": name + ".xml",
        "seconds": round(time.time() - started, 3),
    }
    if status == _NO_PYTEST:
        record["error"] = "pytest is not installed for " + sys.executable
        status = 1
    elif status == _PATCHED:
        record["error"] = "tampering: pytest's own code was changed while the tests ran"
        status = 1
    with os.fdopen(fd, "w") as fh:
        json.dump(record, fh)
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main())
