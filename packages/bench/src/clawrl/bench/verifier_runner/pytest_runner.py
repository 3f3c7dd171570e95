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


def _trusted_roots() -> tuple:
    """Where code may come from that hooks into pytest during the session: pytest's and
    pluggy's packages, the installed packages, and the verifier's own files."""
    import site

    import pluggy
    import pytest

    roots = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    for mod in (pytest, pluggy, sys.modules.get("_pytest")):
        roots.append(os.path.dirname(os.path.abspath(getattr(mod, "__file__", None) or "/")))
    try:
        roots.extend(site.getsitepackages())
        roots.append(site.getusersitepackages())
    except Exception:  # a site module without them
        pass
    return tuple(os.path.join(os.path.realpath(r), "") for r in roots if r and r != "/")


class _Guard:
    """Remembers pytest's code and plugins when the session starts (before any test
    module, and so any module of the workspace, is imported); when it ends, names any
    function of pytest or pluggy that was replaced and any plugin registered since whose
    hooks come from elsewhere than :func:`_trusted_roots`."""

    def __init__(self) -> None:
        self.before: dict = {}
        self.plugins: set = set()
        self.changed: list = []

    def pytest_sessionstart(self, session: object) -> None:
        self.before = _code()
        manager = session.config.pluginmanager  # type: ignore[attr-defined]
        self.plugins = {id(p) for p in manager.get_plugins()}

    def pytest_sessionfinish(self, session: object) -> None:
        after = _code()
        changed = [
            ".".join(key) for key, value in self.before.items() if after.get(key) is not value
        ]
        manager = session.config.pluginmanager  # type: ignore[attr-defined]
        roots = _trusted_roots()
        for plugin in manager.get_plugins():
            if id(plugin) in self.plugins:
                continue
            for caller in manager.get_hookcallers(plugin) or ():
                for impl in caller.get_hookimpls():
                    if impl.plugin is not plugin:
                        continue
                    code = getattr(impl.function, "__code__", None)
                    where = os.path.realpath(code.co_filename) if code else "?"
                    if not where.startswith(roots):
                        changed.append(f"hook {caller.name} registered from {where}")
        self.changed = sorted(set(changed))


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
        detail = ", ".join(changed[:3])[:400]
        sys.stderr.write(f"clawrl: pytest's own code was changed while the tests ran: {detail}\n")
        sys.stderr.flush()
        try:
            with open(junit + ".tamper", "w") as fh:
                fh.write(detail)
        except OSError:
            pass
        os._exit(_PATCHED)
    return status


def main() -> int:
    if len(sys.argv) >= 4 and sys.argv[1] == "--child":
        status = _child(sys.argv[2], sys.argv[3], sys.argv[4:])
        # no exit handler of the tested code runs once pytest has written its report
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
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
        try:
            with open(junit + ".tamper") as fh:
                detail = fh.read(400)
        except OSError:
            detail = "?"
        record["error"] = f"tampering: pytest's own code was changed while the tests ran ({detail})"
        status = 1
    with os.fdopen(fd, "w") as fh:
        json.dump(record, fh)
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main())
