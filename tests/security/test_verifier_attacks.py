"""Red-team tests of verification: each attack is the agent's own output, run
through bench's real path — ``run_rollouts`` with the ``oracle`` harness on a temporary copy
of a task whose ``solution/solve.sh`` is the attack: runner → podman agent sandbox →
copy-out → verifier sandbox (SandboxExecutor) → reward. Each asserts containment (the true
reward, or ``verifier-error``, never the faked one) and names the fix whose revert makes it
fail.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest
from clawrl.bench import (
    ExecSpec,
    HostVerificationError,
    LocalExecutor,
    Mount,
    RolloutResult,
    RolloutStatus,
    SandboxExecutor,
    Task,
    VerifierStatus,
    builtin_suite_dir,
    load_task,
    prepare_workspace,
    run_rollouts,
    verify,
)

pytestmark = [
    pytest.mark.podman,
    pytest.mark.slow,
]

FAKE = {"odd_unsorted": 1, "even_sorted": 1, "even_unsorted": 1}


def attack_task(tmp: Path, stats_py: str, *, base: str = "fix_median") -> Task:
    """A copy of a built-in task whose oracle writes ``stats_py`` as the agent's answer."""
    root = tmp / base
    shutil.copytree(builtin_suite_dir() / base, root)
    (root / "solution" / "solve.sh").write_text(
        "#!/bin/bash\ncat > stats.py <<'CLAWRL_EOF'\n"
        + textwrap.dedent(stats_py)
        + "\nCLAWRL_EOF\n"
    )
    return load_task(root)


def rollout(task: Task, **kwargs: Any) -> RolloutResult:
    (result,) = asyncio.run(run_rollouts([task], ["oracle"], **kwargs))
    return result


def test_fake_reward_then_kill_the_checker(tmp_path: Path) -> None:
    """(a) stats.py writes a fake reward.json and SIGKILLs check.py (its parent).

    Contained by the checker running agent code as uid 65534: the write and the kill fail
    (EPERM), the checker scores the wrong median 0. Revert tried: `run()` without
    user/group/extra_groups — the checker dies with exit 137 and the rollout is a
    verifier-error instead of an ok 0, so this test fails.
    """
    task = attack_task(
        tmp_path,
        f"""
        import os, signal
        try:
            open("/logs/verifier/reward.json", "w").write({json.dumps(FAKE)!r})
        except OSError:
            pass
        try:
            os.kill(os.getppid(), signal.SIGKILL)
        except OSError:
            pass
        def median(values):
            return values[0]
        """,
    )
    r = rollout(task)
    assert r.reward == 0.0
    assert r.verifier is not None and r.verifier.status is VerifierStatus.OK, r.verifier
    assert r.subscores == {k: 0.0 for k in FAKE}


def test_root_verifier_killed_after_fake_reward_is_verifier_error(tmp_path: Path) -> None:
    """(a') A verifier that runs agent code as root (a Harbor-style test.sh) is killed by it
    after the code wrote a perfect reward.txt: a verifier that did not exit 0 is a
    verifier-error, never a score. Revert tried: dropping the exit-status check in
    verify() — the rollout then scores 1.0."""
    task = attack_task(
        tmp_path,
        """
        import os, signal
        open("/logs/verifier/reward.txt", "w").write("1.0")
        os.kill(os.getppid(), signal.SIGKILL)
        """,
    )
    (task.root / "tests" / "check.py").unlink()
    (task.root / "tests" / "test.sh").write_text(
        "cd /workspace && python3 stats.py\necho 0 > /logs/verifier/reward.txt\n"
    )
    task = load_task(task.root)
    r = rollout(task)
    assert r.reward == 0.0
    assert r.status is RolloutStatus.VERIFIER_ERROR, r.reason
    assert r.verifier is not None and r.verifier.status is VerifierStatus.ERROR


def test_detached_daemon_cannot_rewrite_the_reward(tmp_path: Path) -> None:
    """(b) stats.py leaves a detached daemon (double fork, setsid, no inherited fds) that
    rewrites reward.json with full marks as soon as the checker has written it.

    Contained by the uid drop (the daemon cannot write /logs/verifier) and by kill_all
    before the copy-back (it is dead when the reward is read). Revert tried: the uid drop —
    the root daemon wins the race and the rollout scores 1.0.
    """
    task = attack_task(
        tmp_path,
        f"""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                for fd in range(3):
                    os.close(fd)
                deadline = time.time() + 20
                while time.time() < deadline:
                    try:
                        with open("/logs/verifier/reward.json") as f:
                            seen = f.read()
                        if seen and "0.0" in seen:
                            with open("/logs/verifier/reward.json", "w") as f:
                                f.write({json.dumps(FAKE)!r})
                    except OSError:
                        pass
                    time.sleep(0.001)
            os._exit(0)
        os.wait()
        def median(values):
            return values[0]
        """,
    )
    r = rollout(task)
    assert r.reward == 0.0, r.subscores
    assert r.verifier is not None and r.verifier.status is VerifierStatus.OK


def test_host_verification_of_workspace_code_is_refused(tmp_path: Path) -> None:
    """(c) Host verification of fix_median (its checker imports the agent's stats.py) is
    refused with a typed error before any rollout runs. Revert tried: the runner's
    check_host_verification call — the batch then runs (verify()'s own refusal becomes a
    verifier-error per rollout) and no HostVerificationError is raised."""
    task = load_task(builtin_suite_dir() / "fix_median")
    events: list[Any] = []
    with pytest.raises(HostVerificationError) as info:
        rollout(task, verify_executor=LocalExecutor(), progress=events.append)
    assert info.value.task_ids == ["fix_median"]
    assert not [e for e in events if e.kind == "started"]


def test_agent_code_cannot_write_reward_or_verifier_files(tmp_path: Path) -> None:
    """(d) Agent code run by the checker tries to write /logs/verifier, to change and add to
    the trusted /tests, and to signal the checker; its median is right only if every one of
    those failed, so the rollout scores 1.0 iff all were contained. Revert tried: the uid
    drop — the writes succeed and the rollout scores 0."""
    task = attack_task(
        tmp_path,
        """
        import os, signal
        def _contained():
            for path in ("/logs/verifier/reward.json", "/logs/verifier/x",
                         "/tests/check.py", "/tests/new.py"):
                try:
                    open(path, "a").close()
                    return False
                except OSError:
                    pass
            try:
                os.kill(os.getppid(), 0)
                return False
            except PermissionError:
                pass
            return os.getuid() == 65534 and os.getgid() == 65534 and os.getgroups() == []
        CONTAINED = _contained()
        def median(values):
            xs = sorted(values)
            n = len(xs)
            m = xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
            return m if CONTAINED else -1
        """,
    )
    r = rollout(task)
    assert r.status is RolloutStatus.OK, r.reason
    assert r.reward == 1.0, r.subscores


def test_sandbox_executor_kills_everything_before_copying_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reward directory is read only once no process of the verifier sandbox is left:
    SandboxExecutor calls kill_all after the command (its supervisor has killed them at the
    command's exit already) and before any copy-back. Revert
    tried: removing the kill_all call — the recorded order then lacks it."""
    from clawrl.sandbox import Sandbox

    order: list[str] = []
    real_kill, real_copy = Sandbox.kill_all, Sandbox.copy_out

    async def kill_all(self: Sandbox, *a: Any, **k: Any) -> int:
        order.append("kill_all")
        return await real_kill(self, *a, **k)

    async def copy_out(self: Sandbox, *a: Any, **k: Any) -> Any:
        order.append("copy_out")
        return await real_copy(self, *a, **k)

    monkeypatch.setattr(Sandbox, "kill_all", kill_all)
    monkeypatch.setattr(Sandbox, "copy_out", copy_out)
    out = tmp_path / "out"
    out.mkdir()
    spec = ExecSpec(
        argv=("sh", "-c", "(setsid sleep 30 &) ; echo 1 > /out/r"),
        cwd="/",
        mounts=(Mount(out, "/out", read_only=False),),
        timeout_s=30,
    )
    with SandboxExecutor() as ex:
        res = ex.run(spec)
    assert res.exit_code == 0, res.stderr
    assert order == ["kill_all", "copy_out"]
    assert (out / "r").read_text() == "1\n"


# ----------------------------------------------- the trusted files are root's (finding C)


def task_with_files(tmp: Path, base: str, files: dict[str, str]) -> Task:
    """A copy of built-in task ``base`` whose oracle writes ``files`` (path → text) into the
    workspace as the agent's answer."""
    root = tmp / base
    shutil.copytree(builtin_suite_dir() / base, root)
    script = "#!/bin/bash\n"
    for rel, text in files.items():
        script += f"cat > {rel} <<'CLAWRL_EOF'\n{textwrap.dedent(text)}\nCLAWRL_EOF\n"
    (root / "solution" / "solve.sh").write_text(script)
    return load_task(root)


def test_agent_code_cannot_read_the_trusted_checker(tmp_path: Path) -> None:
    """implement_slugify's ``slugify`` implements nothing: it looks the expected answers up
    in the checker's own source, ``/tests/check.py``, which it reads at verify time (as uid
    65534). Contained by the verifier sandbox staging the trusted files root-only (a
    ``Mount(private=True)``: directories 0700, files 0600). Revert tried: ``_tar_of``
    staging private mounts 0755/0644 like the others — the rollout scores 1.0 (red-team
    finding C)."""
    task = task_with_files(
        tmp_path,
        "implement_slugify",
        {
            "textutil.py": r"""
            import ast, re
            def slugify(text):
                try:
                    src = open("/tests/check.py").read()
                except OSError:
                    return "NOT-READABLE"
                for arg, want in re.findall(
                    r'slug\(("(?:[^"\\]|\\.)*")\) == ("(?:[^"\\]|\\.)*")', src
                ):
                    if ast.literal_eval(arg) == text:
                        return ast.literal_eval(want)
                return "NOT-SOLVED"
            """
        },
    )
    r = rollout(task)
    assert r.verifier is not None and r.verifier.status is VerifierStatus.OK, r.verifier
    assert r.reward == 0.0, r.subscores
    assert set(r.subscores.values()) == {0.0}


def clawgym_secret_task(tmp: Path) -> Task:
    """A ClawGym-layout task (its verifier lives in the workspace, at ``/ws/reward``) whose
    ``reward.sh`` runs the agent's ``answer.sh`` unprivileged (uid 65534) and compares its
    output with a hidden ``reward/expected.txt``; the agent's answer reads that file."""
    root = tmp / "cg_secret"
    (root / "reward").mkdir(parents=True)
    (root / "input_files").mkdir()
    (root / "solution").mkdir()
    (root / "data_entry.json").write_text(
        json.dumps({"task_id": "cg_secret", "user_query": "guess", "input_mount_dir": "/ws"})
    )
    (root / "input_files" / "README").write_text("print the secret\n")
    (root / "reward" / "expected.txt").write_text("rtsecret-4f2a\n")
    (root / "reward" / "reward.sh").write_text(
        "#!/bin/bash\n"
        "cd /ws\n"
        "got=$(setpriv --reuid=65534 --regid=65534 --clear-groups -- bash answer.sh"
        " 2>/dev/null || true)\n"
        "want=$(cat /ws/reward/expected.txt)\n"
        'if [ "$got" = "$want" ]; then echo 1; else echo 0; fi\n'
    )
    (root / "solution" / "solve.sh").write_text(
        "#!/bin/bash\necho 'cat reward/expected.txt 2>/dev/null || echo no' > answer.sh\n"
    )
    return load_task(root)


def test_agent_code_cannot_read_a_verifier_inside_the_workspace(tmp_path: Path) -> None:
    """ClawGym layout: the trusted ``reward/`` is copied into the workspace copy; agent
    code that the verifier runs as uid 65534 reads the hidden expected answer from it.
    Contained by the trusted mount being private: ``_tar_of`` stages its files 0600 over
    the workspace's copy of them. Revert tried: ``_tar_of`` staging private mounts
    0755/0644 — the rollout scores 1.0."""
    r = rollout(clawgym_secret_task(tmp_path))
    assert r.verifier is not None and r.verifier.status is VerifierStatus.OK, r.verifier
    assert r.reward == 0.0


@pytest.mark.parametrize("executor", ["sandbox", "local"])
def test_a_private_mount_inside_another_is_root_only(tmp_path: Path, executor: str) -> None:
    """A private mount nested in a writable one (the ClawGym layout) is staged from the
    private mount only: its directory is 0700 and its files 0600 whatever the outer mount
    holds there, so uid 65534 cannot even list it. Revert tried: ``_tar_of`` not skipping
    the outer mount's entries under the private target — the directory is staged 0755
    (``--no-overwrite-dir`` keeps the first mode) and listable, and this test fails;
    ``LocalExecutor`` not applying ``make_private`` to its copy — "755 644", it fails."""
    if executor == "local" and (os.geteuid() != 0 or shutil.which("setpriv") is None):
        pytest.skip("needs root")
    ws, trusted = tmp_path / "ws", tmp_path / "trusted"
    (ws / "reward").mkdir(parents=True)
    (ws / "reward" / "expected.txt").write_text("secret\n")
    trusted.mkdir()
    (trusted / "expected.txt").write_text("secret\n")
    nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups"
    spec = ExecSpec(
        argv=(
            "sh",
            "-c",
            "stat -c %a /ws/reward /ws/reward/expected.txt; "
            f"{nobody} ls /ws/reward >/dev/null 2>&1 && echo listable; "
            f"{nobody} cat /ws/reward/expected.txt 2>/dev/null; true",
        ),
        cwd="/ws",
        mounts=(
            Mount(ws, "/ws", read_only=False, persist=False),
            Mount(trusted, "/ws/reward", read_only=True, private=True),
        ),
        timeout_s=30,
    )
    if executor == "sandbox":
        with SandboxExecutor() as ex:
            res = ex.run(spec)
    else:
        res = LocalExecutor().run(spec)
    assert res.exit_code == 0, res.stderr
    assert res.stdout.split() == ["700", "600"], res.stdout


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root")
def test_host_verifier_inside_the_workspace_is_root_only(tmp_path: Path) -> None:
    """The host path (``LocalExecutor(trust_workspace_code=True)``) keeps the same rule:
    the trusted copy inside the workspace copy is root-only, so the same answer scores 0.
    Revert tried: ``_stage`` without ``_make_private`` — the host verification scores
    1.0."""
    task = clawgym_secret_task(tmp_path)
    ws = prepare_workspace(task, tmp_path / "ws")
    (ws / "answer.sh").write_text("cat reward/expected.txt 2>/dev/null || echo no\n")
    ws.chmod(0o755)
    res = verify(task, ws, LocalExecutor(trust_workspace_code=True))
    assert res.status is VerifierStatus.OK, res
    assert res.reward == 0.0


# ------------------------------------- the root checker never races agent code (finding D)

SWAP_DAEMON = """
import os
WS = "/workspace"
with open(WS + "/rotate.sh", "w") as f:
    f.write("1\\n")
seen = set(os.listdir(WS))
while True:
    for name in os.listdir(WS):
        if name.startswith(".check-") and name not in seen:
            seen.update((name, name + ".real"))
            try:
                os.rename(f"{WS}/{name}", f"{WS}/{name}.real")
                os.symlink(f"{WS}/evil", f"{WS}/{name}")
            except OSError:
                pass
"""

#: Put into the task copy's check.py: the checker loses the CPU for 0.5 s right after it
#: creates a temp dir — the worst case of the scheduler, made certain, so that the race
#: below is won every time where it can be won at all (without it the red team lost it).
SLOW_MKDTEMP = """
import tempfile as _tempfile, time as _time
_mkdtemp = _tempfile.mkdtemp
def _slow_mkdtemp(*args, **kwargs):
    made = _mkdtemp(*args, **kwargs)
    _time.sleep(0.5)
    return made
_tempfile.mkdtemp = _slow_mkdtemp
"""


def test_checker_writes_nothing_where_agent_code_can_swap_it(tmp_path: Path) -> None:
    """log_rotate_script: the agent's rotate.sh, on its first run by the checker (uid
    65534, owner of the workspace), leaves a daemon that waits for the checker's next
    fresh test dir in the workspace, renames it and puts in its place a symlink to a dir
    of its own, whose ``rotate.sh`` is a symlink to ``/logs/verifier/reward.txt``: the
    root checker's copy of the script then writes "1" (the daemon rewrote the agent's
    rotate.sh) into reward.txt, which wins over reward.json. Nothing is really solved
    (rotate.sh is not even executable), so the honest reward is 0. The checker is made to
    pause after each ``tempfile.mkdtemp`` (:data:`SLOW_MKDTEMP`) so the race is decided
    by the code, not by luck.

    Contained by the checker building its test trees in a root-owned 0711 dir outside the
    workspace, and reading rotate.sh with O_NOFOLLOW. Revert tried: the old
    ``run_on_fresh`` (``mkdtemp(dir=WS)`` + ``shutil.copy``) — the rollout scores 1.0
    (red-team finding D).
    """
    task = task_with_files(
        tmp_path,
        "log_rotate_script",
        {
            "swap.py": SWAP_DAEMON,
            "rotate.sh": """
            #!/bin/bash
            if [ "$1" != logs ] && [ ! -e /workspace/evil ]; then
              mkdir /workspace/evil
              ln -s /logs/verifier/reward.txt /workspace/evil/rotate.sh
              setsid python3 /workspace/swap.py </dev/null >/dev/null 2>&1 &
              sleep 0.3
            fi
            """,
        },
    )
    check = task.root / "tests" / "check.py"
    head, sep, rest = check.read_text().partition("from __future__ import annotations\n")
    assert sep
    check.write_text(head + sep + SLOW_MKDTEMP + rest)
    r = rollout(load_task(task.root))
    assert r.verifier is not None and r.verifier.status is VerifierStatus.OK, r.verifier
    assert r.reward == 0.0, (r.reward, r.subscores)


def test_hand_over_gives_a_directory_away_only_after_everything_below_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkers' shared ``hand_over`` (run as root, possibly while agent code left by an
    earlier ``run()`` is alive, e.g. log_rotate_script's second fresh tree): if it gave a
    directory to uid 65534 before walking it, that code could swap a subdirectory for a
    symlink to ``/`` in between and root would hand over ``/logs/verifier``. Contained by
    a bottom-up walk — every path is chowned while all of its ancestors are still root's.
    The chowns are recorded, not made (no root needed). Revert tried: the old top-down
    ``os.walk`` block — the root is chowned first and this test fails."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "clawrl_check_under_test",
        builtin_suite_dir() / "log_rotate_script" / "tests" / "check.py",
    )
    assert spec is not None and spec.loader is not None
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    tree = tmp_path / "t"
    (tree / "sub" / "deep").mkdir(parents=True)
    (tree / "a.log").write_text("x")
    (tree / "sub" / "b.log").write_text("x")
    (tree / "sub" / "deep" / "c").write_text("x")
    (tree / "link").symlink_to("/")
    given: list[str] = []
    monkeypatch.setattr(os, "chown", lambda p, *a, **k: given.append(os.path.relpath(p, tree)))
    check.hand_over(tree)
    assert sorted(given) == sorted(
        [".", "a.log", "link", "sub", "sub/b.log", "sub/deep", "sub/deep/c"]
    )
    for i, rel in enumerate(given):
        later = given[i + 1 :]
        parent = os.path.dirname(rel) or "."
        assert rel == "." or parent in later, f"{parent} given away before {rel}: {given}"


def test_a_script_that_deletes_nothing_earns_no_rotation_credit(tmp_path: Path) -> None:
    """log_rotate_script: an executable ``rotate.sh`` that does nothing used to score 0.5
    ("n_larger_than_count" passed vacuously: nothing deleted when N is large; red team round
    2). Now only the format sub-score remains. Revert tried: the old sub-score -> 0.5."""
    root = tmp_path / "log_rotate_script"
    shutil.copytree(builtin_suite_dir() / "log_rotate_script", root)
    (root / "solution" / "solve.sh").write_text(
        "#!/bin/bash\nprintf '#!/bin/bash\\nexit 0\\n' > rotate.sh; chmod +x rotate.sh\n"
    )
    (r,) = asyncio.run(run_rollouts([load_task(root)], ["oracle"]))
    assert r.status is RolloutStatus.OK, r.reason
    assert r.subscores["n_larger_than_count"] == 0.0 and r.reward == 0.25, r.subscores


# ---------------------------------------------- test runners shadowed or their output faked

FIXTURES = Path(__file__).resolve().parents[2] / "packages" / "bench" / "tests" / "fixtures"
_PASSING_SUMMARY = (
    "=== short test summary info ===\nPASSED test_outputs.py::test_sample\n"
    "PASSED test_outputs.py::test_hidden\n=== 2 passed in 0.01s ==="
)


def _with_oracle(tmp: Path, fixture: str, oracle: str, script: str) -> Task:
    root = tmp / fixture
    shutil.copytree(FIXTURES / fixture, root)
    (root / oracle).write_text("#!/bin/bash\n" + textwrap.dedent(script))
    return load_task(root)


@pytest.mark.parametrize(
    ("fixture", "oracle"),
    [("harbor_slugify", "solution/solve.sh"), ("tb1_word_count", "solution.sh")],
)
def test_a_pytest_module_in_the_workspace_is_tampering(
    tmp_path: Path, fixture: str, oracle: str
) -> None:
    """The agent leaves ``/app/pytest.py`` that prints a passing summary and exits 0: it
    used to stand in for ``python -m pytest`` (Harbor's test.sh, TB1's stand-in script) and
    score 1.0. Now the verifier's pytest runs as ``python -I`` (no working directory on
    ``sys.path``) and such an entry is tampering. Revert tried: ``packages/bench/src`` of
    the commit before the trusted runner → both cases scored 1.0 (this test fails)."""
    task = _with_oracle(
        tmp_path,
        fixture,
        oracle,
        f"""
        cat > /app/pytest.py <<'PY'
        print({_PASSING_SUMMARY!r})
        raise SystemExit(0)
        PY
        """,
    )
    r = rollout(task, concurrency=1)
    assert r.status is RolloutStatus.VERIFIER_ERROR and r.reward == 0.0, (r.reason, r.verifier)
    assert "tampering" in r.reason and "pytest.py" in r.reason, r.reason


def test_a_summary_printed_after_pytest_exits_is_not_read(tmp_path: Path) -> None:
    """TB1: the program the tests run leaves a daemon that waits for pytest to exit, then
    prints a passing summary into the verifier's stdout (reported to score 1.0 when the
    grade was read from stdout). The grade comes from the runner's JUnit report: 0. On the
    commit before the runner this daemon lost the race here (the test passed there too): it
    is kept as a guard; ``test_verdicts.py::test_a_summary_printed_after_pytest_is_not_read``
    (the same fake printed by an exit handler) fails on that commit."""
    task = _with_oracle(
        tmp_path,
        "tb1_word_count",
        "solution.sh",
        f"""
        cat > /app/count.py <<'PY'
        import os, sys, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                def pytest_alive():
                    for p in os.listdir("/proc"):
                        try:
                            cmd = open(f"/proc/{{p}}/cmdline", "rb").read()
                            if p != str(os.getpid()) and b"-m\\0pytest" in cmd or b"pytest_runner" in cmd:
                                return True
                        except OSError:
                            pass
                    return False
                deadline = time.time() + 20
                while time.time() < deadline and pytest_alive():
                    time.sleep(0.05)
                print({_PASSING_SUMMARY!r}, flush=True)
            os._exit(0)
        print("0")
        PY
        """,
    )
    r = rollout(task, concurrency=1)
    assert r.reward == 0.0, (r.status, r.reason, r.verifier)
    assert r.status in (RolloutStatus.OK, RolloutStatus.VERIFIER_ERROR), r
