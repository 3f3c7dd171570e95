"""AgentBench OS interaction: JSON arrays of tasks, graded on the agent's final answer.

A suite file is a JSON array (or one object, or JSONL) of entries ``{description, create:
{image, init}, start, evaluation: {match | check, example}, labels}``; scripts are a
string (bash), ``{"code": …, "language": …}`` or ``{"file": …}`` (relative to the script
directory, default the JSON file's directory). Each entry is one :class:`~clawrl.bench.Task`
with id ``<file stem>-<index:05d>`` (AgentBench's numbering):

* the sandbox image is built from a Dockerfile ``FROM <create.image or ubuntu:22.04>``
  (no registry here, so the local base of :mod:`clawrl.bench.base_images`) whose ``RUN``
  steps are the ``create.init`` scripts, in ``/root``, with the build's network (AgentBench
  runs them in the task's container before the agent, where ``apt install`` works); a
  failing init is a failed build, an ``env-error``. Without task images they run in the
  agent's sandbox instead (:func:`run_setup`);
* ``start`` is started in the background, as the leader of its own session, in the agent's
  sandbox before the agent; that session survives the end of the agent phase (the agent's
  processes are killed, :func:`~clawrl.sandbox.kill_all_but`) and runs while the checks
  run, as in AgentBench — unless its leader died, then none of it is spared;
* the **answer channel**: the agent's final answer is the file :data:`~clawrl.bench.ANSWER_PATH`
  if it wrote one, else the harness's last assistant message, whose last ``answer(…)`` (the
  AgentBench action) wins over the whole text (:func:`agent_answer`);
* the **expected answer** of a ``check`` with a ``null`` item (``null`` = the ``example``
  script) is the example's output computed *before* the agent, right after the init and
  start scripts (:func:`run_setup`, :attr:`SetupResult.expected`), and kept host-side,
  never in the sandbox: AgentBench runs the example after the agent, in the agent's
  sandbox, so an agent that changes the state being counted (``rm /root/*``, ``userdel``,
  ``groupadd``…) could make its trivial answer right. The example runs with no arguments
  (AgentBench passed it ``answer, earlier outputs…``; the examples ignore them); one that
  fails (or outputs more than 64 KiB), or whose output changes when it runs again beside
  one more shell-named process (``ps -A | wc -l``: AgentBench computes it while the agent's
  shell is alive, so no answer is right for the task itself), is the task's failure, an
  ``env-error``;
* grading runs in the agent's own sandbox (:func:`grade_in_sandbox`), as AgentBench does:
  ``match`` compares the answer (exact, or a regular expression), ``check`` runs each
  script with the arguments ``answer, earlier outputs…`` (a ``null`` item contributes the
  stored expected answer instead of running anything) and passes iff all exit 0;
* the oracle (``solution``) writes the stated ``match`` answer (else the example's output,
  the example run in place of the oracle's shell with the command line of the expected
  answer's run) to the answer file;
* ``create`` is an object; a list or a string there (published entries have them) names no
  image and no init script, as AgentBench reads it.

Trust (the agent is root in that sandbox, whose root filesystem is writable): before any
check runs, every process the agent left is dead and the sandbox's root is compared with
its image (``podman diff``); a change to what a check executes or loads — anything under
``/usr``, ``/bin``, ``/sbin``, ``/lib*``, or the ``/etc`` files that steer the dynamic
loader, shells, Python, Perl, git, PAM and ``alternatives`` (:data:`PROTECTED_PATHS`) —
refuses grading (a new command in ``/usr/local/bin`` or ``/usr/local/sbin`` only when it
shadows one of the checks' ``PATH``: a task may ask for a new command; an existing entry
whose only change is a cleared setuid, setgid or sticky bit, :data:`REMOVABLE_BITS`, not at
all: a task may ask for that too): ``verifier-error``,
reward 0, reason ``tampering: …`` (scored, counted).
The checks run as fresh processes with absolute interpreters (``/bin/bash --noprofile
--norc``, ``python3 -I``: no startup files, no user site directory), the check code as a
``-c`` argument (no file the agent could replace), ``PATH`` fixed to the system
directories, ``BASH_ENV`` / ``ENV`` / ``LD_*`` empty, and neither a user site directory
(``PYTHONNOUSERSITE``) nor a user or system git configuration (``GIT_CONFIG_GLOBAL``,
``GIT_CONFIG_NOSYSTEM``) for the programs they start (:data:`CHECK_ENV`: ``/root`` is the
agent's). A repository's own ``.git/config`` (and what it includes) cannot steer a check's
git: the output settings and the programs git would run (hooks, fsmonitor, pager…) are
overridden on git's command-line scope (:data:`GIT_OVERRIDES`), and replacement objects
and notes are off. Programs that no override can name in advance (drivers that attributes
select: ``filter.*``, ``diff.*.textconv``, ``diff.external``, ``merge.*.driver``; and
``includeIf``), a ``core.worktree`` that points a repository at another directory, and
index entries hidden from ``status`` (assume-unchanged, skip-worktree) refuse grading when
a check runs git and any repository on the sandbox's filesystem has one
(:data:`GIT_PROGRAM_KEYS`). The checks still read the machine state the agent left, as in AgentBench —
except the example's expected answer, fixed before the agent ran.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import re
import shlex
import stat
from collections.abc import Collection, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from clawrl.bench.errors import TaskLoadError
from clawrl.bench.staging import stage_files
from clawrl.bench.task import (
    ANSWER_PATH,
    SOLUTION_MOUNT,
    AnswerGrader,
    Layout,
    Script,
    SolutionSpec,
    Task,
    VerifierSpec,
)
from clawrl.bench.tasks.base import SetupResult, TaskLayout, make_task
from clawrl.bench.verify import VerifierResult, VerifierStatus
from clawrl.sandbox import (
    ExecResult,
    PinnedSession,
    Sandbox,
    SandboxError,
    bits_removed_only,
    pin_session,
    root_changes,
)

__all__ = [
    "CHECK_ENV",
    "COMMAND_DIRS",
    "GIT_OVERRIDES",
    "GIT_PROGRAM_KEYS",
    "PROTECTED_PATHS",
    "REMOVABLE_BITS",
    "AgentBenchOSLayout",
    "SetupResult",
    "agent_answer",
    "grade_in_sandbox",
    "is_agentbench_file",
    "load_agentbench_os",
    "needs_expected",
    "new_commands",
    "run_setup",
    "tampered_paths",
]

DEFAULT_IMAGE = "ubuntu:22.04"
_INSTRUCTION = (
    "{description}\n\nYou work in a Linux shell. When you have the answer, give it as "
    "`answer(YOUR ANSWER)` in your last message, or write it (and nothing else) to the file "
    f"{ANSWER_PATH}. If the task asks for a change to the system, make it and end."
)
_ANSWER_CALL = re.compile(r"answer\((.*)\)", re.DOTALL)
_SCRIPT_TIMEOUT_S = 60.0
_EXAMPLE_MAX_BYTES = 64 * 1024
#: Seconds the start script gets before the example computes the expected answer (its
#: process is launched, not necessarily running, when :func:`_start` returns).
_START_SETTLE_S = 1.0
_INIT_DIR = "/clawrl-init"

#: What the agent must not change for its sandbox to be graded: these paths and everything
#: below them (``*`` as in :func:`fnmatch.fnmatchcase`, within one path component).
PROTECTED_PATHS: tuple[str, ...] = (
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
    "/etc/ld.so.*", "/etc/profile", "/etc/profile.d", "/etc/bash.bashrc", "/etc/environment",
    "/etc/alternatives", "/etc/python*", "/etc/perl", "/etc/gitconfig", "/etc/pam.d",
    "/etc/security", "/etc/nsswitch.conf",
)  # fmt: skip
#: Permission bits an agent may clear on an entry of :data:`PROTECTED_PATHS` (setuid,
#: setgid, sticky: "remove the SUID bit of find"), its content, owner and other bits kept.
#: Nothing else: a check that runs a program whose read or execute bits were cleared fails,
#: and a negated check (``! grep -q …``) then passes.
REMOVABLE_BITS = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX
#: Git settings every check's git runs with, whatever the repository's own ``.git/config``
#: (or a file it includes) says: command-line scope (``GIT_CONFIG_COUNT``) wins over every
#: file. The output of ``log``/``show``/``status``/``diff`` as git's defaults print it, and
#: no program of the repository's run (hooks, fsmonitor, pager, editor, signature tools).
GIT_OVERRIDES: tuple[tuple[str, str], ...] = (
    ("format.pretty", "medium"),
    ("log.abbrevCommit", "false"),
    ("log.date", "default"),
    ("log.decorate", "no"),
    ("log.follow", "false"),
    ("log.showRoot", "true"),
    ("log.showSignature", "false"),
    ("i18n.logOutputEncoding", "UTF-8"),
    ("color.ui", "never"),
    ("status.short", "false"),
    ("status.branch", "false"),
    ("status.showUntrackedFiles", "normal"),
    ("status.relativePaths", "true"),
    ("diff.noprefix", "false"),
    ("diff.mnemonicPrefix", "false"),
    ("diff.relative", "false"),
    ("diff.context", "3"),
    ("diff.interHunkContext", "0"),
    ("diff.algorithm", "myers"),
    ("diff.renames", "true"),
    ("diff.suppressBlankEmpty", "false"),
    ("diff.ignoreSubmodules", "none"),
    ("status.displayCommentPrefix", "false"),
    ("status.renames", "true"),
    ("grep.patternType", "basic"),
    ("grep.lineNumber", "false"),
    ("grep.column", "false"),
    ("grep.fullName", "false"),
    ("log.mailmap", "false"),
    ("mailmap.file", "/dev/null"),
    ("mailmap.blob", ""),
    ("core.trustctime", "true"),
    ("core.checkStat", "default"),
    ("core.ignoreStat", "false"),
    ("core.fileMode", "true"),
    ("core.symlinks", "true"),
    ("core.autocrlf", "false"),
    ("core.eol", "native"),
    ("core.quotePath", "true"),
    ("core.abbrev", "auto"),
    ("core.excludesFile", "/dev/null"),
    ("core.attributesFile", "/dev/null"),
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.untrackedCache", "false"),
    ("core.pager", "cat"),
    ("core.editor", "true"),
    ("core.sshCommand", "ssh"),
    ("core.askPass", ""),
    ("credential.helper", ""),
    ("gpg.program", "gpg"),
    ("gpg.ssh.program", "ssh-keygen"),
    ("gpg.x509.program", "gpgsm"),
)
_GIT_ENV: dict[str, str] = {
    "GIT_CONFIG_COUNT": str(len(GIT_OVERRIDES)),
    **{f"GIT_CONFIG_KEY_{i}": k for i, (k, _) in enumerate(GIT_OVERRIDES)},
    **{f"GIT_CONFIG_VALUE_{i}": v for i, (_, v) in enumerate(GIT_OVERRIDES)},
    "GIT_CONFIG_PARAMETERS": "",
    "GIT_NO_REPLACE_OBJECTS": "1",
    "GIT_NOTES_REF": "refs/notes/clawrl-none",
    "GIT_PAGER": "cat",
    "GIT_EDITOR": "true",
    "GIT_SEQUENCE_EDITOR": "true",
}
#: Where a new command is no tampering unless it shadows one (:func:`new_commands`).
COMMAND_DIRS: tuple[str, ...] = ("/usr/local/bin", "/usr/local/sbin")
#: The environment of every check, of the example and of the start script (on top of the
#: image's): system PATH, no startup files, nothing read from the agent's home
#: (``/root``, writable and a tmpfs, so not seen by the tampering check) by the programs a
#: check starts: no user site-packages (a ``python3`` without ``-I`` in a bash check), no
#: ``~/.gitconfig`` nor ``/etc/gitconfig``.
CHECK_ENV: dict[str, str] = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "BASH_ENV": "",
    "ENV": "",
    "LD_PRELOAD": "",
    "LD_LIBRARY_PATH": "",
    "LD_AUDIT": "",
    "PYTHONNOUSERSITE": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    **_GIT_ENV,
}


def _script(obj: Any, script_dir: Path, where: str) -> Script | None:
    if obj is None:
        return None
    if isinstance(obj, str):
        return Script(code=obj)
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: a script must be a string or an object")
    language = obj.get("language", "bash")
    if language not in ("bash", "python"):
        raise ValueError(f"{where}: unsupported script language {language!r}")
    if "file" in obj:
        path = (script_dir / str(obj["file"])).resolve()
        try:
            code = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"{where}: cannot read script {obj['file']!r}: {exc}") from None
    elif "code" in obj:
        code = str(obj["code"])
    else:
        raise ValueError(f"{where}: a script needs `code` or `file`")
    return Script(language=language, code=code)


def _grader(evaluation: Any, script_dir: Path, where: str) -> AnswerGrader:
    if not isinstance(evaluation, dict):
        raise ValueError(f"{where}: `evaluation` must be an object")
    example = _script(evaluation.get("example"), script_dir, f"{where} example")
    if "match" in evaluation:
        match = evaluation["match"]
        if isinstance(match, str):
            return AnswerGrader(match_answer=match, example=example)
        if isinstance(match, dict) and ("answer" in match or "regex" in match):
            return AnswerGrader(
                match_answer=match.get("answer"),
                match_regex=match.get("regex"),
                strip=bool(match.get("strip", True)),
                example=example,
            )
        raise ValueError(f"{where}: `match` must be a string or {{answer | regex}}")
    if "check" in evaluation:
        raw = evaluation["check"]
        items = raw if isinstance(raw, list) else [raw]
        check = tuple(_script(c, script_dir, f"{where} check") for c in items)
        if not check:
            raise ValueError(f"{where}: `check` needs a script")
        if any(c is None for c in check) and example is None:
            raise ValueError(f"{where}: a null check needs an `example`")
        if check[-1] is None:  # the example's output would be compared with nothing
            raise ValueError(f"{where}: a null check needs a later check script")
        return AnswerGrader(check=check, example=example)
    raise ValueError(f"{where}: `evaluation` needs `match` or `check`")


def _stage(files: dict[str, str]) -> Path:
    """A content-addressed cache directory holding ``files`` (relative path -> text)."""
    data = {rel: text.encode("utf-8") for rel, text in files.items()}
    return stage_files("agentbench", "agentbench-1", data, ("environment", "verifier", "solution"))


def _environment(image: str, init: list[Script]) -> dict[str, str]:
    """The image's build context: a Dockerfile ``FROM image`` running each init script."""
    files: dict[str, str] = {}
    lines = [f"FROM {image}"]
    for i, script in enumerate(init):
        name = f"init-{i}.{'py' if script.language == 'python' else 'sh'}"
        files[f"environment/{name}"] = script.code
        run = "python3" if script.language == "python" else "bash"
        lines += [f"COPY {name} {_INIT_DIR}/{name}", f"RUN cd /root && {run} {_INIT_DIR}/{name}"]
    if init:
        lines.append(f"RUN rm -rf {_INIT_DIR}")
    files["environment/Dockerfile"] = "\n".join(lines) + "\n"
    return files


def _oracle_script(grader: AnswerGrader) -> str | None:
    """solve.sh: the stated ``match`` answer, else the example's output, into the answer
    file (AgentBench grades a ``match`` without its example). The example replaces
    solve.sh's shell (``exec``) with the very command line the expected answer was computed
    with (:func:`_argv`): an example that counts processes (``ps -A | wc -l``) sees the same
    process tree as then, not one more shell."""
    write = f"mkdir -p {shlex.quote(str(Path(ANSWER_PATH).parent))}\n"
    if grader.match_answer is not None:
        return f"{write}printf '%s' {shlex.quote(grader.match_answer)} > {ANSWER_PATH}\n"
    if grader.example is not None:
        ext = "sh" if grader.example.language == "bash" else "py"
        argv = _argv(grader.example.model_copy(update={"code": "CODE"}), [])
        line = " ".join('"$code"' if a == "CODE" else shlex.quote(a) for a in argv)
        return (
            f"{write}code=$(cat {SOLUTION_MOUNT}/example.{ext}; printf x)\ncode=${{code%x}}\n"
            f"exec {line} > {ANSWER_PATH}\n"
        )
    return None


def _entry_task(entry: Any, index: int, path: Path, script_dir: Path) -> Task:
    where = f"{path.name}[{index}]"
    if not isinstance(entry, dict) or not isinstance(entry.get("description"), str):
        raise ValueError(f"{where}: an entry needs a `description` string")
    create = entry.get("create") or {}
    if not isinstance(create, dict):
        # AgentBench looks its keys up with `in`: a list or a string names no image and no
        # init script (a published entry has a `check` list there)
        create = {}
    raw_init = create.get("init") or []
    init = [
        _script(s, script_dir, f"{where} init")
        for s in (raw_init if isinstance(raw_init, list) else [raw_init])
    ]
    grader = _grader(entry.get("evaluation"), script_dir, where)
    image = str(create.get("image") or DEFAULT_IMAGE)
    files = _environment(image, [s for s in init if s is not None])
    oracle = _oracle_script(grader)
    if oracle is not None:
        files["solution/solve.sh"] = "#!/bin/bash\n" + oracle
        if grader.example is not None and grader.match_answer is None:
            ext = "sh" if grader.example.language == "bash" else "py"
            files[f"solution/example.{ext}"] = grader.example.code
    staged = _stage(files)
    labels = entry.get("labels")
    return make_task(
        id=f"{path.stem}-{index:05d}",
        instruction=_INSTRUCTION.format(description=entry["description"].strip()),
        category=str(labels[0]) if isinstance(labels, list) and labels else None,
        layout=Layout.AGENTBENCH_OS,
        root=path.parent,
        workspace_path="/root",
        verifier=VerifierSpec(files_dir=staged / "verifier", command=("true",)),
        solution=(
            SolutionSpec(
                files_dir=staged / "solution", command=("bash", f"{SOLUTION_MOUNT}/solve.sh")
            )
            if oracle is not None
            else None
        ),
        image=image,
        dockerfile=staged / "environment" / "Dockerfile",
        init_scripts=tuple(s for s in init if s is not None),
        start_script=_script(entry.get("start"), script_dir, f"{where} start"),
        grader=grader,
        metadata={"file": path.name, "index": index, "labels": labels},
    )


def _entries(path: Path) -> list[Any]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    data = json.loads(text)
    return data if isinstance(data, list) else [data]


def is_agentbench_file(path: Path) -> bool:
    """Whether ``path`` is a ``.json``/``.jsonl`` file of AgentBench OS entries (each with a
    ``description`` and an ``evaluation``)."""
    if path.suffix not in (".json", ".jsonl") or not path.is_file():
        return False
    try:
        entries = _entries(path)
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return bool(entries) and all(
        isinstance(e, dict) and "description" in e and "evaluation" in e for e in entries
    )


def load_agentbench_os(path: Path | str, script_dir: Path | str | None = None) -> list[Task]:
    """Every task of an AgentBench OS file, or of every such file in a directory (sorted).

    Args:
        path: a ``.json`` / ``.jsonl`` file or a directory of them.
        script_dir: where ``{"file": …}`` scripts are found (default: each file's directory).

    Raises:
        TaskLoadError: unreadable JSON, an invalid entry (the reason names file and index),
            or no AgentBench file under ``path``.
    """
    root = Path(path).resolve()
    files = sorted(p for p in root.iterdir() if is_agentbench_file(p)) if root.is_dir() else [root]
    if not files:
        raise TaskLoadError(root, "no AgentBench OS .json files")
    tasks: list[Task] = []
    for f in files:
        sdir = Path(script_dir).resolve() if script_dir is not None else f.parent
        try:
            entries = _entries(f)
            tasks += [_entry_task(e, i, f, sdir) for i, e in enumerate(entries)]
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise TaskLoadError(f, str(exc)) from exc
    return tasks


def _argv(script: Script, params: list[str]) -> list[str]:
    """A fresh process running ``script`` with ``params`` (absolute interpreters, no
    startup files, no user site directory)."""
    if script.language == "python":
        return ["/usr/bin/env", "python3", "-I", "-c", script.code, *params]
    return ["/bin/bash", "--noprofile", "--norc", "-c", script.code, "--", *params]


def needs_expected(task: Task) -> bool:
    """Whether grading ``task`` needs the example's output (a ``null`` check item)."""
    g = task.grader
    return g is not None and g.example is not None and any(c is None for c in g.check)


def _tail(res: ExecResult) -> str:
    return (res.stdout + res.stderr).decode("utf-8", "replace")[-2000:]


#: Runs its arguments while one more process runs beside them, a shell in name
#: (``bash-bystander``), then ends it.
_BYSTANDER = 'exec -a bash-bystander sleep 30 & "$@"; s=$?; kill $! 2>/dev/null; exit $s'


async def _expected(task: Task, sb: Sandbox) -> tuple[str | None, str | None]:
    """``(expected answer, None)``: the example's standard output, run as a check is; or
    ``(None, why it failed)``, also when a second run beside one more shell-named process
    prints something else (``ps -A | wc -l``: an answer that depends on the moment it is
    asked, which AgentBench computes while the agent's shell is alive)."""
    g = task.grader
    assert g is not None and g.example is not None
    argv = _argv(g.example, [])

    async def run(prefix: list[str]) -> ExecResult:
        return await sb.exec(
            [*prefix, *argv],
            timeout=_SCRIPT_TIMEOUT_S,
            workdir="/root",
            env=CHECK_ENV,
            max_output_bytes=_EXAMPLE_MAX_BYTES,
        )

    res = await run([])
    if res.timed_out:
        return None, f"example script timed out after {_SCRIPT_TIMEOUT_S:g} s:\n{_tail(res)}"
    if not res.ok:
        return None, f"example script exited {res.exit_code}:\n{_tail(res)}"
    if res.stdout_truncated:
        return None, f"example script output over {_EXAMPLE_MAX_BYTES} bytes"
    expected = res.stdout.decode("utf-8", "replace")
    # Again, beside one more shell (a process named like one, as an agent's shell is while
    # AgentBench runs the example): an answer that changes is not a fact of the task.
    again = await run(["/bin/bash", "--noprofile", "--norc", "-c", _BYSTANDER, "bystander"])
    other = again.stdout.decode("utf-8", "replace")
    if again.ok and other != expected:
        return None, (
            "the example's answer depends on the processes alive when it runs "
            f"({expected.strip()[:80]!r} alone, {other.strip()[:80]!r} beside one more "
            "shell): no answer is right for the task itself"
        )
    return expected, None


async def _start(script: Script, sb: Sandbox) -> PinnedSession:
    """Start ``script`` in the background as the leader of a new session (the leader then
    sleeps forever, so the session id stays its own) and pin that session."""
    body = f"{shlex.join(_argv(script, []))} & exec sleep infinity"
    line = f"setsid /bin/bash --noprofile --norc -c {shlex.quote(body)} </dev/null >/dev/null 2>&1 & echo $!"
    res = await sb.exec(
        ["/bin/sh", "-c", line], timeout=_SCRIPT_TIMEOUT_S, workdir="/root", env=CHECK_ENV
    )
    pid = int(res.stdout.decode().strip() or "0")
    for _ in range(100):  # until setsid ran
        try:
            return await pin_session(sb, pid)
        except SandboxError as exc:
            last = exc
            await asyncio.sleep(0.02)
    raise SandboxError(f"start script: {last}")


async def run_setup(task: Task, sb: Sandbox, *, init: bool = True) -> SetupResult:
    """Run ``task``'s init scripts (unless ``init`` is False: its image already ran them),
    then start its start script in the background, then (a task with a ``null`` check)
    run its example for the expected answer, in ``sb``, before the agent. An init or
    example script that fails is :attr:`SetupResult.error` (the task's failure: an
    ``env-error``); the start session, if any, is pinned even then.

    Raises:
        SandboxError: the sandbox cannot run commands, or the start script's session
            could not be pinned.
    """
    for i, script in enumerate(task.init_scripts if init else ()):
        res = await sb.exec(_argv(script, []), timeout=_SCRIPT_TIMEOUT_S, workdir="/root")
        if not res.ok:
            return SetupResult(f"init script {i} exited {res.exit_code}:\n{_tail(res)}")
    sessions = () if task.start_script is None else (await _start(task.start_script, sb),)
    if not needs_expected(task):
        return SetupResult(sessions=sessions)
    if sessions:
        await asyncio.sleep(_START_SETTLE_S)
    expected, error = await _expected(task, sb)
    return SetupResult(error=error, sessions=sessions, expected=expected)


def _last_assistant(logs: dict[str, str]) -> str | None:
    for name in ("transcript", "trajectory"):
        try:
            messages = json.loads(logs.get(name) or "null")
        except json.JSONDecodeError:
            continue
        if isinstance(messages, dict):
            messages = messages.get("messages")
        for m in reversed(messages if isinstance(messages, list) else []):
            if isinstance(m, dict) and m.get("role") == "assistant" and m.get("content"):
                return str(m["content"])
    return None


async def agent_answer(sb: Sandbox, logs: dict[str, str]) -> str | None:
    """The agent's final answer (see the module docstring); ``None`` if it gave none."""
    try:
        data = await sb.get_file(ANSWER_PATH, max_bytes=64 * 1024)
        return data.decode("utf-8", "replace")
    except (FileNotFoundError, SandboxError):
        pass
    text = _last_assistant(logs)
    if text is None:
        return None
    calls = _ANSWER_CALL.findall(text)
    return calls[-1] if calls else text


def _result(ok: bool, reason: str, subs: dict[str, float] | None = None) -> VerifierResult:
    return VerifierResult(
        reward=1.0 if ok else 0.0,
        subscores=subs or {},
        status=VerifierStatus.OK,
        reason="" if ok else reason,
    )


def _protected(path: str) -> bool:
    p = PurePosixPath(path)
    return any(
        fnmatch.fnmatchcase(str(q), pattern) for q in (p, *p.parents) for pattern in PROTECTED_PATHS
    )


def tampered_paths(changes: list[tuple[str, str]], bits_removed: Collection[str] = ()) -> list[str]:
    """The ``(kind, path)`` root changes (``podman diff``) that touch :data:`PROTECTED_PATHS`,
    as ``"<kind> <path>"`` lines, less the changed entries in ``bits_removed`` (the image's
    own, with only :data:`REMOVABLE_BITS` cleared: :func:`~clawrl.sandbox.bits_removed_only`)."""
    return [
        f"{kind} {path}"
        for kind, path in changes
        if _protected(path) and not (kind == "C" and path in bits_removed)
    ]


def new_commands(
    changes: list[tuple[str, str]],
) -> tuple[list[str], list[tuple[str, str]]]:
    """``(commands, rest)``: the ``(kind, path)`` root changes split into the commands added
    to :data:`COMMAND_DIRS` (a task may ask for one: "make a ``calc`` command") and every
    other change, less the directories above those commands (changed by adding them)."""
    added = [
        path
        for kind, path in changes
        if kind == "A" and str(PurePosixPath(path).parent) in COMMAND_DIRS
    ]
    above = {str(q) for path in added for q in PurePosixPath(path).parents}
    rest = [
        (kind, path)
        for kind, path in changes
        if path not in added and not (kind == "C" and path in above)
    ]
    return added, rest


async def _shadowed(sb: Sandbox, commands: list[str]) -> list[str]:
    """The ``commands`` (new files in :data:`COMMAND_DIRS`) whose name is also a file of
    another directory of the checks' ``PATH``: the command a check would have run.

    Raises:
        SandboxError: the sandbox could not tell.
    """
    others = [
        f"{d}/{PurePosixPath(c).name}"
        for c in commands
        for d in CHECK_ENV["PATH"].split(":")
        if d != str(PurePosixPath(c).parent)
    ]
    others = [p for p in others if p not in commands]
    script = 'for p in "$@"; do if [ -e "$p" ] || [ -L "$p" ]; then printf "%s\\n" "$p"; fi; done'
    res = await sb.exec(["/bin/sh", "-c", script, "sh", *others], timeout=30, env=CHECK_ENV)
    if not res.ok:
        raise SandboxError(f"cannot look up commands: {_tail(res)}")
    found = {PurePosixPath(p).name for p in res.stdout.decode("utf-8", "replace").split()}
    return [c for c in commands if PurePosixPath(c).name in found]


async def _tampering(sb: Sandbox) -> VerifierResult | None:
    """The refusal to grade ``sb`` when the agent changed what checks execute (``None``
    when it did not, or could not: a read-only root). A new command in
    :data:`COMMAND_DIRS` is such a change only when it shadows a command of the checks'
    ``PATH`` (looked up once nothing else protected changed: the sandbox's tools are the
    image's then)."""
    if sb.spec.read_only_root:
        return None
    try:
        commands, rest = new_commands((await root_changes(sb)).all())
        changed = [path for kind, path in rest if kind == "C" and _protected(path)]
        bad = tampered_paths(rest, await bits_removed_only(sb, changed, REMOVABLE_BITS))
        if not bad and commands:
            bad = [f"A {c} (shadows a command)" for c in await _shadowed(sb, commands)]
    except SandboxError as exc:
        return VerifierResult(
            reward=0.0, status=VerifierStatus.ERROR, reason=f"tampering check failed: {exc}"
        )
    if not bad:
        return None
    shown = ", ".join(bad[:8]) + (f" (+{len(bad) - 8} more)" if len(bad) > 8 else "")
    return VerifierResult(
        reward=0.0,
        status=VerifierStatus.ERROR,
        reason=f"tampering: the agent changed what the checks run ({shown}); not graded",
    )


#: Keys of a repository's configuration (and of the files it includes) that name programs
#: git runs and no override can name in advance (drivers chosen by attributes), or files
#: included on conditions the scan cannot evaluate: a repository that sets one is not graded.
GIT_PROGRAM_KEYS = re.compile(
    r"^(filter\..*|diff\.external|diff\..*\.(textconv|command)|merge\..*\.driver"
    r"|core\.gitproxy|includeif\..*)$",
    re.IGNORECASE,
)
# Every git directory (a directory holding HEAD, objects/ and config: a `.git`, a bare
# repository, a linked worktree's) and the keys of its configuration files, as
# "<dir>\t<key>" lines.
_GIT_KEYS = r"""
find / \( -path /proc -o -path /sys -o -path /dev \) -prune -o -type f -name HEAD -print 2>/dev/null |
while IFS= read -r head; do
  d=${head%/HEAD}
  [ -d "$d/objects" ] && [ -f "$d/config" ] || continue
  for f in "$d"/config "$d"/config.worktree "$d"/worktrees/*/config.worktree; do
    [ -f "$f" ] || continue
    git config --file "$f" --includes --name-only --list 2>/dev/null | sed "s|^|$d	|"
  done
  if [ -f "$d/index" ] && git --git-dir="$d" ls-files -v 2>/dev/null | grep -q '^[a-zS]'; then
    printf '%s	index.hidden\n' "$d"
  fi
done
"""


def _git_refused(gitdir: str, key: str) -> bool:
    """Whether the configuration ``key`` (or ``index.hidden``: index entries marked
    assume-unchanged or skip-worktree, which ``status`` and ``diff`` then do not look at)
    of the git directory ``gitdir`` refuses grading. ``core.worktree`` (the repository
    compares another directory) is a submodule's own only under ``.git/modules``."""
    if key == "index.hidden" or GIT_PROGRAM_KEYS.match(key):
        return True
    return key.lower() == "core.worktree" and "/modules/" not in gitdir


async def _git_programs(task: Task, sb: Sandbox) -> VerifierResult | None:
    """The refusal to grade when a check runs git and a repository's configuration names
    a program for it (:data:`GIT_PROGRAM_KEYS`), redirects its work tree, or its index
    hides files from ``status`` (:func:`_git_refused`); ``None`` otherwise."""
    g = task.grader
    if g is None or not any(c is not None and "git" in c.code for c in g.check):
        return None
    res = await sb.exec(
        ["/bin/bash", "--noprofile", "--norc", "-c", _GIT_KEYS],
        timeout=_SCRIPT_TIMEOUT_S,
        env=CHECK_ENV,
    )
    if not res.ok:
        return VerifierResult(
            reward=0.0, status=VerifierStatus.ERROR, reason=f"git check failed: {_tail(res)}"
        )
    bad = sorted(
        {
            line
            for line in res.stdout.decode("utf-8", "backslashreplace").splitlines()
            if _git_refused(*line.rpartition("\t")[::2])
        }
    )
    if not bad:
        return None
    shown = ", ".join(b.replace("\t", ": ") for b in bad[:8])
    return VerifierResult(
        reward=0.0,
        status=VerifierStatus.ERROR,
        reason=f"tampering: a repository steers the checks' git ({shown}); not graded",
    )


async def grade_in_sandbox(
    task: Task, sb: Sandbox, answer: str | None, *, expected: str | None = None
) -> VerifierResult:
    """Grade ``answer`` for ``task`` (which has a :attr:`~clawrl.bench.Task.grader`) in the
    agent's sandbox ``sb``, whose agent processes are already dead (see the module
    docstring's trust rules). ``expected`` is :attr:`SetupResult.expected`, the
    example's output from before the agent, which a ``null`` check item stands for (the
    example is never run here). A wrong answer is ``ok`` with reward 0 and the reason; a
    sandbox whose protected paths changed is a ``verifier-error`` (reward 0, reason
    ``tampering: …``), and so is a ``null`` check without ``expected``; one that cannot
    run the checks is an ``infra-error``.

    Raises:
        ValueError: ``task`` has no grader.
    """
    g = task.grader
    if g is None:
        raise ValueError(f"task {task.id!r} has no answer grader")
    if expected is None and needs_expected(task):
        return VerifierResult(
            reward=0.0,
            status=VerifierStatus.ERROR,
            reason="no expected answer: the example must run before the agent (run_setup)",
        )
    refused = await _tampering(sb)
    if refused is None:
        try:
            refused = await _git_programs(task, sb)
        except SandboxError as exc:
            return VerifierResult(
                reward=0.0, status=VerifierStatus.INFRA_ERROR, reason=f"git check: {exc}"
            )
    if refused is not None:
        return refused
    if g.match_answer is not None or g.match_regex is not None:
        got = "" if answer is None else (answer.strip() if g.strip else answer)
        if g.match_answer is not None:
            return _result(got == g.match_answer, f"answer {got[:200]!r} is not the expected one")
        return _result(
            re.search(str(g.match_regex), got) is not None, f"answer {got[:200]!r} does not match"
        )
    params = [answer or ""]
    for i, script in enumerate(g.check):
        if script is None:  # the example's output, computed before the agent
            assert expected is not None
            params.append(expected)
            continue
        try:
            res = await sb.exec(
                _argv(script, params), timeout=_SCRIPT_TIMEOUT_S, workdir="/root", env=CHECK_ENV
            )
        except SandboxError as exc:
            return VerifierResult(
                reward=0.0, status=VerifierStatus.INFRA_ERROR, reason=f"check {i}: {exc}"
            )
        if not res.ok:
            return _result(False, f"check {i} exited {res.exit_code} (answer {params[0][:200]!r})")
        params.append(res.stdout.decode("utf-8", "replace"))
    return _result(True, "")


class AgentBenchOSLayout(TaskLayout):
    """AgentBench OS interaction: a suite directory of ``.json`` files of entries, set up
    by init and start scripts, graded on the agent's answer in its own sandbox."""

    name = Layout.AGENTBENCH_OS.value

    def detect(self, path: Path) -> bool:
        return False  # its tasks are entries of suite files, not directories

    def load(self, path: Path) -> Task:
        raise TaskLoadError(path, "an AgentBench OS task is an entry of a suite's .json file")

    def detect_suite(self, path: Path) -> bool:
        if path.is_file():
            return is_agentbench_file(path)
        return any(is_agentbench_file(p) for p in path.iterdir())

    def load_suite(self, path: Path) -> list[Task]:
        return load_agentbench_os(path)

    async def prepare(self, task: Task, sandbox: Sandbox, *, built: bool) -> SetupResult:
        return await run_setup(task, sandbox, init=not built)

    async def grade(
        self, task: Task, sandbox: Sandbox, logs: Mapping[str, str], setup: SetupResult
    ) -> VerifierResult | None:
        if task.grader is None:
            return None
        answer = await agent_answer(sandbox, dict(logs))
        return await grade_in_sandbox(task, sandbox, answer, expected=setup.expected)
