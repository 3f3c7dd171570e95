"""Red-team tests of verification on a snapshot of the agent's container (Harbor and
Terminal-Bench 1 verifiers see the whole container, as their own harnesses verify).

What it keeps out, each test the agent's own output through ``run_rollouts`` with the
``oracle`` harness on a Harbor task built here (real podman, ``FROM debian:bookworm-slim``):

* the agent's processes: the verifier runs in a fresh sandbox, where nothing the agent
  started runs;
* the reward path and the verifier's files: what the agent left at ``/logs/verifier`` or
  ``/tests`` is listed, never restored (the tests are bound read-only over it, the reward
  directory is new);
* the programs the verifier's sandbox runs by name (``bash``, ``sh``, ``tar``, …) and
  ``/etc/ld.so.preload``: changing one is tampering.

What remains (the container is the agent's, as under Harbor): a file planted where the
verifier's scripts find their other programs or their interpreter its modules
(``/usr/local/bin/grep``, ``site-packages``). It is listed in the result's
``outside_changes``; the last test pins that. Each docstring names the revert that makes
the test fail.
"""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest
from clawrl.bench import RolloutResult, RolloutStatus, Task, load_task, run_rollouts

pytestmark = [pytest.mark.podman, pytest.mark.slow]


def harbor_task(root: Path, solve: str, test_sh: str) -> Task:
    """A Harbor task with ``WORKDIR /app``, no network, and this oracle and test script."""
    for d in ("environment", "tests", "solution"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (root / "tests" / "test.sh").write_text(test_sh)
    (root / "solution" / "solve.sh").write_text(solve)
    (root / "instruction.md").write_text("Configure the tool.\n")
    (root / "task.toml").write_text('version = "1.0"\n[environment]\nallow_internet = false\n')
    return load_task(root)


#: The honest check: the agent's /etc/snapx.conf says "hi" and /app/out says "right".
TEST_SH = r"""#!/bin/bash
if [ "$(cat /etc/snapx.conf 2>/dev/null)" = hi ]; then echo "saw /etc/snapx.conf"; fi
if [ "$(cat /etc/snapx.conf 2>/dev/null)" = hi ] && grep -qx right /app/out; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""


def rollout(tmp: Path, solve: str, test_sh: str = TEST_SH) -> RolloutResult:
    task: Task = harbor_task(tmp / "task", "#!/bin/bash\n" + textwrap.dedent(solve), test_sh)
    (result,) = asyncio.run(run_rollouts([task], ["oracle"], concurrency=1))
    return result


def test_planted_reward_and_test_files_do_not_count(tmp_path: Path) -> None:
    """The agent writes the wrong answer, a reward of 1 at the reward path and a test script
    that writes 1 at the tests' path: the verifier sees its /etc file (the snapshot is
    restored) but its own tests and a fresh reward directory, so the reward is 0; the
    planted files are listed. Fails when the state's ``exclude`` of the verifier's paths is
    dropped (the planted reward and test script are restored), and on the code before
    verification on a snapshot (the verifier never saw /etc/snapx.conf)."""
    r = rollout(
        tmp_path,
        """
        echo hi > /etc/snapx.conf
        echo wrong > /app/out
        mkdir -p /logs/verifier /tests
        echo 1 > /logs/verifier/reward.txt
        printf '#!/bin/bash\\necho 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh
        printf 'def test_ok():\\n    pass\\n' > /tests/test_outputs.py
        """,
    )
    assert r.status is RolloutStatus.OK and r.reward == 0.0, (r.reason, r)
    assert r.verifier is not None and "saw /etc/snapx.conf" in r.verifier.stdout
    changes = set(r.outside_changes)
    assert {
        "A /logs/verifier/reward.txt",
        "A /tests/test.sh",
        "A /tests/test_outputs.py",
    } <= changes, changes


def test_agent_processes_are_gone(tmp_path: Path) -> None:
    """A detached daemon the agent leaves (it would write reward 1 over the verifier's) runs
    in no verifier sandbox: the honest check, which also fails when a process of the
    agent's is alive there, scores 1. Fails on the code before verification on a snapshot
    (the verifier never saw /etc/snapx.conf: 0) and when the verifier runs in the agent's
    own sandbox."""
    test_sh = (
        "#!/bin/bash\n"
        "for f in /proc/[0-9]*/cmdline; do\n"
        "  if tr '\\0' ' ' < \"$f\" 2>/dev/null | grep -q snapx-daemon; then\n"
        "    echo 'agent process alive'; echo 0 > /logs/verifier/reward.txt; exit 0\n"
        "  fi\n"
        "done\n" + TEST_SH.split("\n", 1)[1]
    )
    r = rollout(
        tmp_path,
        """
        echo hi > /etc/snapx.conf
        echo right > /app/out
        cat > /usr/local/sbin/snapx-daemon <<'EOF'
        #!/bin/bash
        while :; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; sleep 0.05; done
        EOF
        chmod +x /usr/local/sbin/snapx-daemon
        setsid /usr/local/sbin/snapx-daemon </dev/null >/dev/null 2>&1 &
        sleep 0.3
        """,
        test_sh,
    )
    assert r.status is RolloutStatus.OK and r.reward == 1.0, (r.reason, r.verifier)
    assert "A /usr/local/sbin/snapx-daemon" in r.outside_changes


@pytest.mark.parametrize(
    ("plant", "needle"),
    [
        ("/usr/local/bin/bash", "/usr/local/bin/bash"),  # shadows the verifier's bash
        ("/usr/local/bin/tar", "/usr/local/bin/tar"),  # the supervisor's tar
        ("/etc/ld.so.preload", "/etc/ld.so.preload"),  # loaded by every program
    ],
)
def test_a_planted_program_the_verifier_runs_is_tampering(
    tmp_path: Path, plant: str, needle: str
) -> None:
    """A program the verifier's sandbox runs by name (here one that would write reward 1),
    or ``/etc/ld.so.preload``, changed by the agent: a ``verifier-error`` naming it, never
    a score. Fails when :func:`clawrl.bench.verify._planted` is not called (the planted
    ``bash`` writes reward 1)."""
    r = rollout(
        tmp_path,
        f"""
        echo hi > /etc/snapx.conf
        echo wrong > /app/out
        printf '#!/bin/sh\\nmkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\\n' > {plant}
        chmod +x {plant}
        """,
    )
    assert r.status is RolloutStatus.VERIFIER_ERROR and r.reward == 0.0, (r.reason, r)
    assert "tampering" in r.reason and needle in r.reason, r.reason


def test_a_program_planted_where_the_script_finds_it_is_listed(tmp_path: Path) -> None:
    """What remains: a program the verifier's script runs (its ``grep``) planted earlier in
    ``PATH`` is the agent's, as under Harbor — it cannot be told from an honest install.
    It is listed in ``outside_changes`` for review. Fails on the code before verification
    on a snapshot (no ``outside_changes``)."""
    r = rollout(
        tmp_path,
        """
        echo hi > /etc/snapx.conf
        echo wrong > /app/out
        printf '#!/bin/sh\\nexit 0\\n' > /usr/local/bin/grep
        chmod +x /usr/local/bin/grep
        """,
    )
    assert r.status is RolloutStatus.OK, (r.reason, r)
    assert "A /usr/local/bin/grep" in r.outside_changes


def test_the_host_executor_refuses_a_container_state(tmp_path: Path) -> None:
    """The local executor cannot restore the agent's container state: it refuses the run
    (an ``infra-error`` of the rollout), never verifies the workspace alone."""
    from clawrl.bench import ExecSpec, ExecutorError, LocalExecutor
    from clawrl.sandbox import SandboxState

    spec = ExecSpec(argv=("true",), cwd="/", state=SandboxState(tmp_path / "s.tar"))
    with pytest.raises(ExecutorError, match="sandbox executor"):
        LocalExecutor().run(spec)
