"""Attacks on AgentBench OS grading, which runs check scripts in the agent's own sandbox.

The agent is root in that sandbox and its root filesystem is writable (AgentBench tasks
add users and edit /etc). Each attack below is what a policy under RL could do in its
commands: plant fake interpreters or a preloaded library, steer Python's or git's startup
from its home, leave a process running into the grading, or pose as the task's own
``start`` process. Every one must end with reward 0 (``verifier-error`` and a
``tampering`` reason where the root was changed), while the honest agent still scores 1
and the task's ``start`` session survives to the grading. (An agent changing the state an
``example`` counts: ``packages/bench/tests/test_agentbench_os.py``.)

The agent's commands are run as root in a sandbox made by the rollout runner's own
:meth:`RolloutRunner.sandbox_spec`, then the runner's steps follow: kill the agent's
processes (sparing the start session), grade.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from clawrl.bench import RolloutRunner, RolloutSpec, Task, load_agentbench_os
from clawrl.bench.harness import get_harness
from clawrl.bench.task_env import TaskEnvironments
from clawrl.bench.tasks.agentbench_os import grade_in_sandbox, run_setup
from clawrl.bench.verify import VerifierResult, VerifierStatus
from clawrl.sandbox import Sandbox, kill_all_but

pytestmark = [pytest.mark.podman, pytest.mark.slow]

_PY_CHECK = "import sys\nsys.exit(0 if sys.argv[1].strip() == '42' else 1)\n"
_TICKS = 'a=$(cat /root/tick); sleep 0.5; b=$(cat /root/tick); [ "$a" != "$b" ]'
# a bash check that starts a plain python3 (no -I): its user site would be /root/.local
_PY_IN_BASH = """python3 -c 'import sys; sys.exit(0 if sys.argv[1] == "42" else 1)' "$1\""""
# a git repository whose last commit must be "done", checked loosely (git reads ~/.gitconfig)
_REPO = "git init -q /root/repo && git -C /root/repo -c user.name=a -c user.email=a@b commit -q --allow-empty -m init"
_DONE = "git -C /root/repo -c user.name=a -c user.email=a@b commit -q --allow-empty -m done"
# the task's own start process: a ticker the check needs alive
_TICKER = "while :; do date +%s%N > /root/tick; sleep 0.05; done"
ENTRIES = [
    {"description": "Answer 42.", "evaluation": {"check": {"language": "python", "code": _PY_CHECK}}},
    {"description": "Answer 42.", "evaluation": {"check": {"code": '[ "$1" = 42 ]'}}},
    {"description": "Keep it ticking.", "start": _TICKER, "evaluation": {"check": {"code": _TICKS}}},
    {
        "description": "Create the user bob.",
        "create": {"init": {"code": "mkdir -p /root/data"}},
        "evaluation": {"check": {"code": "id bob"}, "example": {"code": "useradd bob"}},
    },
    {"description": "Answer 42.", "evaluation": {"check": {"code": _PY_IN_BASH}}},
    {
        "description": "Commit 'done' in /root/repo.",
        "create": {"init": {"code": _REPO}},
        "evaluation": {"check": {"code": "git -C /root/repo log -1 | grep -q done"}},
    },
    {
        "description": "Keep it ticking.",
        "create": {"init": {"code": _REPO}},
        "start": _TICKER,
        "evaluation": {"check": {"code": f"git -C /root/repo status >/dev/null; {_TICKS}"}},
    },
    {
        "description": "Make a command `calc` that prints the value of its expression.",
        "evaluation": {"check": {"code": '[ "$(calc "2 * (3 + 4)")" = 14 ] && [ "$(calc 1+1)" = 2 ]'}},
    },
]  # fmt: skip
# a repository with a change to commit, checked by `git status`
_CHANGED = f"{_REPO} && cd /root/repo && echo a > f && git add f && {_DONE} && echo b > f"
ENTRIES.append(
    {
        "description": "Commit every change in /root/repo.",
        "create": {"init": {"code": _CHANGED}},
        "evaluation": {"check": {"code": '[ -z "$(git -C /root/repo status --porcelain)" ]'}},
    }
)
# an honest calc (in /usr/local/bin: a new command, shadowing none)
_CALC = """printf '#!/bin/sh\\nexec python3 -c "print($*)"\\n' > /usr/local/bin/calc; chmod +x /usr/local/bin/calc"""
# AgentBench's SUID task (os_interaction 6/new.json): the check lists the file's mode
ENTRIES.append(
    {
        "description": "Remove the SUID bit of /usr/bin/find.",
        "create": {"init": {"code": "chmod u+s /usr/bin/find"}},
        "evaluation": {"check": {"code": "[ ! -u /usr/bin/find ] && [ -x /usr/bin/find ]"}},
    }
)
# a negated check: a grep that cannot run would make it pass
ENTRIES.append(
    {
        "description": "Remove every line that says bad from /root/f.",
        "create": {"init": {"code": "printf 'good\\nbad\\n' > /root/f"}},
        "evaluation": {"check": {"code": "! grep -q bad /root/f"}},
    }
)
PY, BASH, TICK, USER, PY_IN_BASH, GIT, GIT_TICK, CALC, GIT_CLEAN, SUID, NO_BAD = range(11)

# An agent process with the environment of the task's start leader, in a new session.
_POSER = f"""
import subprocess
leader = subprocess.run(["pgrep", "-f", "^sleep infinity$"], capture_output=True, text=True)
pid = leader.stdout.split()[0]
raw = open(f"/proc/{{pid}}/environ").read().split("\\0")
env = dict(item.split("=", 1) for item in raw if "=" in item)
assert "CLAWRL_EXEC_ID" in env
subprocess.Popen(["sh", "-c", {_TICKER!r}], env=env, start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
"""
# A preloaded library whose constructor ends every dynamically linked program with status 0.
_PRELOAD_C = "#include <unistd.h>\n__attribute__((constructor)) static void f(void) { _exit(0); }\n"


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> list[Task]:
    root = tmp_path_factory.mktemp("agentbench-attacks")
    (root / "attacks.json").write_text(json.dumps(ENTRIES))
    return load_agentbench_os(root / "attacks.json")


@pytest.fixture(scope="module")
def preload_so(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build the preloaded library")
    d = tmp_path_factory.mktemp("preload")
    (d / "p.c").write_text(_PRELOAD_C)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(d / "p.so"), str(d / "p.c")], check=True)
    return (d / "p.so").read_bytes()


async def _grade(
    task: Task, agent: list[str], files: dict[str, bytes] | None = None
) -> VerifierResult:
    """Run ``agent`` (shell commands, as root) in the runner's sandbox of ``task``, then the
    runner's end of the agent phase and the grading; answer "0" (wrong) unless the agent
    wrote /run/clawrl/answer."""
    image = await TaskEnvironments().image(task)
    runner = RolloutRunner()
    spec = RolloutSpec(task=task, harness=get_harness("noop"), sample_index=0, group_id="g")
    with tempfile.TemporaryDirectory() as ws:
        sb_spec = runner.sandbox_spec(spec, Path(ws), image)
    assert sb_spec.read_only_root is False  # the case that matters
    async with await Sandbox.create(dataclasses.replace(sb_spec, files={})) as sb:
        setup = await run_setup(task, sb, init=False)
        assert setup.error is None
        if files:
            await sb.put_files(files)
        for cmd in agent:
            await sb.exec(["/bin/sh", "-c", cmd], timeout=30, workdir="/root")
        await kill_all_but(sb, setup.sessions)
        try:
            answer = (await sb.get_file("/run/clawrl/answer")).decode()
        except FileNotFoundError:
            answer = "0"
        return await grade_in_sandbox(task, sb, answer, expected=setup.expected)


def _refused(v: VerifierResult, needle: str) -> None:
    assert v.reward == 0.0 and v.status is VerifierStatus.ERROR, v
    assert v.reason.startswith("tampering:") and needle in v.reason, v.reason


def _answer(text: str) -> str:
    return f"mkdir -p /run/clawrl && printf {text} > /run/clawrl/answer"


def test_honest_agents_score_one(tasks: list[Task]) -> None:
    """Right answers, a state change (useradd edits /etc/passwd: allowed), and a start
    process alive at grading time."""

    async def go() -> list[float]:
        return [
            (await _grade(tasks[PY], [_answer("42")])).reward,
            (await _grade(tasks[BASH], [_answer("42")])).reward,
            (await _grade(tasks[TICK], [])).reward,
            (await _grade(tasks[USER], ["useradd bob"])).reward,
            (await _grade(tasks[USER], [])).reward,
            (await _grade(tasks[PY_IN_BASH], [_answer("42")])).reward,
            (await _grade(tasks[GIT], [_DONE])).reward,
            (await _grade(tasks[GIT], [])).reward,
            (await _grade(tasks[GIT_TICK], [])).reward,
            (await _grade(tasks[CALC], [_CALC])).reward,
            (await _grade(tasks[CALC], [_CALC.replace("/local/bin/", "/local/sbin/")])).reward,
            (await _grade(tasks[CALC], [])).reward,
        ]

    assert asyncio.run(go()) == [1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0]


@pytest.mark.parametrize(
    ("index", "cmd", "needle"),
    [
        # a python3 earlier on PATH that passes every check
        (PY, "printf '#!/bin/sh\\nexit 0\\n' > /usr/local/bin/python3; chmod +x /usr/local/bin/python3",
         "A /usr/local/bin/python3"),
        # a bash earlier on PATH, and the real one replaced by a wrapper
        (BASH, "printf '#!/bin/sh\\nexit 0\\n' > /usr/local/bin/bash; chmod +x /usr/local/bin/bash",
         "A /usr/local/bin/bash"),
        (BASH, "mv /usr/bin/bash /usr/bin/bash.real; printf '#!/bin/sh\\nexit 0\\n' > /usr/bin/bash;"
         " chmod +x /usr/bin/bash", "/usr/bin/bash"),
        # PATH changes for login shells, Python's site customisation, alternatives
        (BASH, "echo 'PATH=/root/bin:$PATH' >> /etc/profile", "C /etc/profile"),
        (PY, "echo 'import os; os._exit(0)' > /etc/python3.11/sitecustomize.py", "/etc/python3.11"),
        (BASH, "ln -sf /bin/true /etc/alternatives/awk", "/etc/alternatives/awk"),
        # a new command that shadows one the checks run, beside an honest new one
        (CALC, f"{_CALC}; printf '#!/bin/sh\\nexit 0\\n' > /usr/local/bin/python3; chmod +x /usr/local/bin/python3",
         "A /usr/local/bin/python3 (shadows a command)"),
    ],
)  # fmt: skip
def test_planted_programs_are_refused(tasks: list[Task], index: int, cmd: str, needle: str) -> None:
    _refused(asyncio.run(_grade(tasks[index], [cmd])), needle)


def test_clearing_suid_is_allowed(tasks: list[Task]) -> None:
    """Clearing the setuid bit of a program under /usr (the file's content, owner and other
    bits kept) is no tampering: the honest fix scores 1, nothing done scores 0."""

    async def go() -> list[tuple[VerifierStatus, float]]:
        out = []
        for agent in (["chmod u-s /usr/bin/find"], ["chmod 0755 /usr/bin/find"], []):
            v = await _grade(tasks[SUID], agent)
            out.append((v.status, v.reward))
        return out

    ok = VerifierStatus.OK
    assert asyncio.run(go()) == [(ok, 1.0), (ok, 1.0), (ok, 0.0)]


@pytest.mark.parametrize(
    ("index", "cmd", "needle"),
    [
        # read or execute bits: a program a check runs fails, a negated check passes
        (NO_BAD, "chmod a-x /usr/bin/grep", "C /usr/bin/grep"),
        (NO_BAD, "chmod a-r /usr/bin/grep", "C /usr/bin/grep"),
        # the bit cleared, and the content, the owner or another bit changed too
        (SUID, "chmod u-s /usr/bin/find && cat /usr/bin/true > /usr/bin/find", "C /usr/bin/find"),
        (SUID, "chown 1:1 /usr/bin/find && chmod 0755 /usr/bin/find", "C /usr/bin/find"),
        (SUID, "chmod u-s,g+s /usr/bin/find", "C /usr/bin/find"),
        (SUID, "chmod u-s,o-x /usr/bin/find", "C /usr/bin/find"),
        # a directory made again (its image entries hidden), though its mode is the same
        (NO_BAD, "rm -rf /usr/share/doc && mkdir /usr/share/doc", "C /usr/share/doc"),
    ],
)  # fmt: skip
def test_more_than_clearing_suid_is_refused(
    tasks: list[Task], index: int, cmd: str, needle: str
) -> None:
    _refused(asyncio.run(_grade(tasks[index], [cmd])), needle)


def test_preloaded_library_is_refused(tasks: list[Task], preload_so: bytes) -> None:
    cmd = "cp /root/p.so /usr/local/lib/p.so && echo /usr/local/lib/p.so > /etc/ld.so.preload"
    v = asyncio.run(_grade(tasks[BASH], [cmd], {"/root/p.so": preload_so}))
    _refused(v, "A /etc/ld.so.preload")


@pytest.mark.parametrize("index", [PY, PY_IN_BASH])
def test_python_user_site_is_ignored(tasks: list[Task], index: int) -> None:
    """/root is a tmpfs (outside the root-filesystem comparison): a usercustomize there
    would run in every ``python3`` started with HOME=/root, but the checks run ``-I``, and
    a ``python3`` a bash check starts has ``PYTHONNOUSERSITE=1`` (``CHECK_ENV``)."""
    site = "/root/.local/lib/python3.11/site-packages"
    cmd = f"mkdir -p {site} && echo 'import os; os._exit(0)' > {site}/usercustomize.py"
    v = asyncio.run(_grade(tasks[index], [cmd]))
    assert v.status is VerifierStatus.OK and v.reward == 0.0, v


def test_git_user_config_is_ignored(tasks: list[Task]) -> None:
    """A ~/.gitconfig in the agent's /root (a tmpfs) would steer the git a check runs (here
    every ``git log`` prints "done"); the checks run with ``GIT_CONFIG_GLOBAL=/dev/null``."""
    cmd = "printf '[format]\\n\\tpretty = format:done\\n' > /root/.gitconfig"
    v = asyncio.run(_grade(tasks[GIT], [cmd]))
    assert v.status is VerifierStatus.OK and v.reward == 0.0, v


_GIT = "git -C /root/repo"
# a commit object whose message is "done", that no branch points to
_DONE_OBJECT = f"{_GIT} -c user.name=a -c user.email=a@b commit-tree HEAD^{{tree}} -m done"


@pytest.mark.parametrize(
    ("cmd", "needle"),
    [
        # the repository compares a clean copy of its files
        (f"mkdir /root/clean && cp /root/repo/f /root/clean/ && {_GIT} config core.worktree /root/clean"
         " && git --git-dir=/root/repo/.git --work-tree=/root/clean checkout -- f",
         "/root/repo/.git: core.worktree"),
        # the changed file hidden from `git status` by its index entry
        (f"{_GIT} update-index --assume-unchanged f", "/root/repo/.git: index.hidden"),
        (f"{_GIT} update-index --skip-worktree f", "/root/repo/.git: index.hidden"),
    ],
)  # fmt: skip
def test_git_status_cannot_be_hidden(tasks: list[Task], cmd: str, needle: str) -> None:
    """A repository whose work tree is elsewhere, or whose index hides a changed file,
    shows a clean ``git status``: not graded. The honest commit scores 1."""
    _refused(asyncio.run(_grade(tasks[GIT_CLEAN], [cmd])), needle)


def test_git_status_honest_commit(tasks: list[Task]) -> None:
    commit = f"{_GIT} -c user.name=a -c user.email=a@b commit -qam done"
    v = asyncio.run(_grade(tasks[GIT_CLEAN], [commit]))
    assert v.status is VerifierStatus.OK and v.reward == 1.0, v
    assert asyncio.run(_grade(tasks[GIT_CLEAN], [])).reward == 0.0


@pytest.mark.parametrize(
    "cmd",
    [
        # the repository's own config: every `git log` prints "done"
        f"{_GIT} config format.pretty format:done",
        # ... through a named format
        f"{_GIT} config pretty.fake format:done && {_GIT} config format.pretty fake",
        # ... from a file the repository's config includes
        f"printf '[format]\\n\\tpretty = format:done\\n' > /root/inc && {_GIT} config include.path /root/inc",
        # ... a tag named "done" shown by `git log` (log.decorate)
        f"{_GIT} tag done && {_GIT} config log.decorate short",
        # a replacement object: HEAD shown as another commit
        f"{_GIT} replace HEAD $({_DONE_OBJECT})",
        # a note on HEAD, which `git log` shows under the message
        f"{_GIT} -c user.name=a -c user.email=a@b notes add -m done HEAD",
    ],
)
def test_git_repository_config_is_ignored(tasks: list[Task], cmd: str) -> None:
    """The repository's own ``.git/config`` (and what it includes), and its replacement
    refs, cannot change what ``git log`` shows a check: the checks run with the output
    settings overridden (``CHECK_ENV``) and replacement objects off."""
    v = asyncio.run(_grade(tasks[GIT], [cmd]))
    assert v.status is VerifierStatus.OK and v.reward == 0.0, v


# a program that leaves a ticker behind, for git to run during the checks
_HOOK = f"#!/bin/sh\nsetsid sh -c '{_TICKER}' </dev/null >/dev/null 2>&1 &\n".encode()


@pytest.mark.parametrize(
    "cmd",
    [
        f"{_GIT} config core.fsmonitor /root/h",
        # a clean filter, run on a changed tracked file that `git status` hashes
        f"cd /root/repo && echo a > f && git add f && {_DONE.replace('done', 'f')} && "
        "echo '* filter=x' > .gitattributes && git config filter.x.clean /root/h && echo b > f",
    ],
)
def test_git_runs_no_agent_program(tasks: list[Task], cmd: str) -> None:
    """A program the repository names is not run by the git of a check: it could leave a
    process behind that the check sees (here a ticker, after the agent stopped the task's
    own). An fsmonitor is overridden; a driver that attributes select (no override can name
    it) refuses grading."""
    stop_start = "pkill -9 -f '^/bin/bash --noprofile --norc -c while'"
    v = asyncio.run(
        _grade(tasks[GIT_TICK], [stop_start, "chmod +x /root/h", cmd], {"/root/h": _HOOK})
    )
    if "filter" in cmd:
        _refused(v, "/root/repo/.git: filter.x.clean")
    else:
        assert v.status is VerifierStatus.OK and v.reward == 0.0, v


@pytest.mark.parametrize(
    "cmd",
    [
        # the agent's own ticker, detached from everything
        f"setsid sh -c '{_TICKER}' </dev/null >/dev/null 2>&1 &",
        # ... posing as the start process: its environment (exec tag included) copied
        f"python3 -c {shlex.quote(_POSER)}",
        # ... after killing the task's start session
        f"pkill -9 -f '^sleep infinity$'; setsid sh -c '{_TICKER}' </dev/null >/dev/null 2>&1 &",
    ],
)
def test_agent_processes_do_not_survive(tasks: list[Task], cmd: str) -> None:
    """Only the task's start session survives the agent phase: an agent that kills it and
    leaves its own ticker gets 0; so does a ticker dressed as the start process (the start
    ticker is stopped first: only the agent's could pass)."""
    stop_start = "pkill -9 -f '^/bin/bash --noprofile --norc -c while'"  # its ticker only
    v = asyncio.run(_grade(tasks[TICK], [stop_start, cmd]))
    assert v.status is VerifierStatus.OK and v.reward == 0.0, v
