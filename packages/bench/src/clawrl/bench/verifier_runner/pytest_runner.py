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

Run as root with ``$CLAWRL_TEST_UID`` set (Harbor's ``test.sh``, Terminal-Bench 1's
``run-tests.sh`` in a verifier sandbox), the runner starts pytest as that unprivileged
user (and group; no supplementary groups, no capabilities): code of the workspace that the
tests import or run cannot write the reward directory nor the runner's reports, nor
signal the verifier's root processes. Before that the runner hands that user the
workspace (``$CLAWRL_WORKSPACE``, chowned) and a private directory for pytest's reports
(its ``--junitxml``, and the ``--ctrf`` / ``--junitxml`` paths of the task's command line,
copied to where the task asked for them afterwards). When pytest's session ends, pytest
kills every other process of that user before it writes a report; when pytest has
exited, the runner kills every process of that user (one still alive is tampering), and
only then reads the report and copies it into ``$CLAWRL_REPORT_DIR``. An exit status that
the report does not back (0 or 1 without a report, 0 with a failed test, 1 without one)
is tampering too, and the runner then exits 1.
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

_NO_PYTEST = 86
_PATCHED = 87
_OWN = ("pytest", "_pytest", "pluggy")
#: pytest's options that name a report file it writes: given a private path, copied back.
_OUTPUT_OPTIONS = ("--junitxml", "--junit-xml", "--ctrf")
_MAX_REPORT = 16 << 20


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


def _processes_of(uid: int, but: int = 0) -> list:
    """Live (not zombie) processes whose real uid is ``uid``, but ``but``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == but:
            continue
        try:
            with open("/proc/" + name + "/status") as fh:
                fields = dict(line.split(":", 1) for line in fh.read().splitlines() if ":" in line)
        except (OSError, ValueError):
            continue
        state = fields.get("State", "").split()
        uids = fields.get("Uid", "").split()
        if uids and int(uids[0]) == uid and state and state[0] not in ("Z", "X"):
            found.append(int(name))
    return found


def _kill_others(wait_s: float) -> list:
    """As the tests' user: SIGKILL every other process of this user at once (``kill -1``:
    none can fork past it) until none is left; returns those still alive after
    ``wait_s``."""
    deadline = time.time() + wait_s
    while True:
        with contextlib.suppress(OSError):  # none to signal
            os.kill(-1, signal.SIGKILL)
        left = _processes_of(os.getuid(), os.getpid())
        if not left or time.time() > deadline:
            return left
        time.sleep(0.01)


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
    plugins: list = [guard]
    if os.getuid() != 0 and os.environ.get("CLAWRL_TEST_UID") == str(os.getuid()):

        class _Reaper:
            """Before any report is written (first of the session's finishers): no other
            process of the tests' user is left to rewrite it."""

            @pytest.hookimpl(tryfirst=True)
            def pytest_sessionfinish(self, session: object) -> None:
                left = _kill_others(5.0)
                if left:
                    sys.stderr.write(f"clawrl: processes of the tests survived: {left[:5]}\n")

        plugins.append(_Reaper())
    status = int(pytest.main(["--junitxml=" + junit, *args], plugins=plugins))
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


def _test_uid() -> "int | None":
    """The user pytest runs as: ``$CLAWRL_TEST_UID`` when the runner runs as root and it
    names another user; else ``None`` (pytest runs as the runner's user)."""
    value = os.environ.get("CLAWRL_TEST_UID", "")
    if os.geteuid() != 0 or not value.isdigit() or int(value) == 0:
        return None
    return int(value)


def _drop_to(uid: int) -> None:
    """In the child, before exec: the test user, its group, no other group; a change of
    uid from root to another clears every capability."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def _reap(uid: int) -> list:
    """As root: kill every process of ``uid`` (through a helper that takes that uid and
    runs ``kill -1``), again until none is left; the ones alive after 50 rounds."""
    left: list = []
    for _ in range(50):
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
                with contextlib.suppress(OSError):
                    os.kill(-1, signal.SIGKILL)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        left = _processes_of(uid)
        if not left:
            return []
        time.sleep(0.02)
    return left


def _hand_over(paths: list, passed: list, uid: int) -> None:
    """Give ``uid`` the directory trees ``paths`` (never following a link), and the right
    to pass through the directories above them and above ``passed``."""
    for top in paths:
        if not top or not os.path.isdir(top) or os.path.islink(top):
            continue
        top = os.path.abspath(top)
        if top == "/":
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            for name in [*dirnames, *filenames]:
                with contextlib.suppress(OSError):
                    os.lchown(os.path.join(dirpath, name), uid, uid)
        os.lchown(top, uid, uid)
    for path in [*paths, *passed]:
        parent = os.path.dirname(os.path.abspath(path))
        while parent and parent != "/":
            try:
                mode = os.stat(parent).st_mode
                if not mode & 0o001:
                    os.chmod(parent, (mode & 0o7777) | 0o011)
            except OSError:
                pass
            parent = os.path.dirname(parent)


def _redirect_outputs(args: list, work: str) -> tuple:
    """``args`` with each report path of :data:`_OUTPUT_OPTIONS` replaced by one in
    ``work``; the (private path, asked-for path) pairs; the task's own JUnit path or
    ``None``."""
    out: list = []
    moves: list = []
    task_junit = None
    i = 0
    while i < len(args):
        arg = args[i]
        opt, eq, value = arg.partition("=")
        if opt in _OUTPUT_OPTIONS and (eq or i + 1 < len(args)):
            if not eq:
                value = args[i + 1]
                i += 1
            private = os.path.join(work, f"out-{len(moves)}")
            moves.append((private, os.path.abspath(value)))
            if opt != "--ctrf":
                task_junit = private
            out.append(f"{opt}={private}")
        else:
            out.append(arg)
        i += 1
    return out, moves, task_junit


def _read_private(path: str) -> bytes:
    """A regular file the tests' user wrote (never through a link), at most 16 MiB."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not (st.st_mode & 0o170000 == 0o100000) or st.st_size > _MAX_REPORT:
            raise OSError("not a regular file of at most 16 MiB")
        with os.fdopen(os.dup(fd), "rb") as fh:
            return fh.read(_MAX_REPORT + 1)[:_MAX_REPORT]
    finally:
        os.close(fd)


def _write_new(path: str, data: bytes) -> None:
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _backed(status: int, report: bytes) -> str:
    """Why pytest's exit status (0: all passed, 1: some failed) is not what its JUnit
    report says; ``""``: it is, or the status is another."""
    if status not in (0, 1):
        return ""
    if not report:
        return f"pytest exited {status} without a JUnit report"
    import xml.etree.ElementTree as ET

    try:
        root = ET.fromstring(report)
    except ET.ParseError:
        return f"pytest exited {status} with a JUnit report that is not XML"
    failed = any(
        child.tag in ("failure", "error") for case in root.iter("testcase") for child in case
    )
    if status == 0 and failed:
        return "pytest exited 0 but its JUnit report holds a failed test"
    if status == 1 and not failed:
        return "pytest exited 1 but its JUnit report holds no failed test"
    return ""


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
    final = os.path.join(reports, name + ".xml")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    uid = _test_uid()
    work = tempfile.mkdtemp(prefix="clawrl-pytest-")
    problems: list = []
    record: dict = {"args": args, "mode": mode, "python": sys.executable, "exit": -1}
    try:
        given = args
        args, moves, task_junit = _redirect_outputs(args, work)
        junit = task_junit or os.path.join(work, "report.xml")
        preexec = None
        if uid is not None:
            test_uid = uid
            passed = [os.path.realpath(sys.executable), os.getcwd(), os.path.abspath(__file__)]
            try:
                import site

                passed.append(os.path.join(site.getusersitepackages(), ""))
            except Exception:  # a site module without user sites
                pass
            _hand_over([work, os.environ.get("CLAWRL_WORKSPACE", "")], passed, test_uid)
            preexec = lambda: _drop_to(test_uid)  # noqa: E731
        else:
            env.pop("CLAWRL_TEST_UID", None)
        started = time.time()
        argv = [sys.executable, "-I", os.path.abspath(__file__), "--child", mode, junit, *args]
        status = subprocess.call(argv, env=env, preexec_fn=preexec)
        if uid is not None:
            left = _reap(uid)
            if left:
                problems.append(
                    f"tampering: processes of the tests survived every kill: {left[:5]}"
                )
        try:
            report = _read_private(junit)
        except OSError:
            report = b""
        if report:
            _write_new(final, report)
        for private, asked in moves:
            with contextlib.suppress(OSError):
                _write_new(asked, _read_private(private))
        record = {
            "args": given,
            "mode": mode,
            "python": sys.executable,
            "exit": status,
            "junit": name + ".xml",
            "seconds": round(time.time() - started, 3),
            "user": os.geteuid() if uid is None else uid,
        }
        if status == _NO_PYTEST:
            record["error"] = "pytest is not installed for " + sys.executable
            status = 1
        elif status == _PATCHED:
            try:
                detail = _read_private(junit + ".tamper")[:400].decode("utf-8", "replace")
            except OSError:
                detail = "?"
            problems.append(
                f"tampering: pytest's own code was changed while the tests ran ({detail})"
            )
        elif _backed(status, report):
            problems.append("tampering: " + _backed(status, report))
        if problems:
            record["error"] = "; ".join(problems)
            status = 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    with os.fdopen(fd, "w") as fh:
        json.dump(record, fh)
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main())
