"""AgentBench OS interaction: JSON arrays of tasks, graded on the agent's final answer.

A suite file is a JSON array (or one object, or JSONL) of entries ``{description, create:
{image, init}, start, evaluation: {match | check, example}, labels}``; scripts are a
string (bash), ``{"code": …, "language": …}`` or ``{"file": …}`` (relative to the script
directory, default the JSON file's directory). Each entry is one :class:`~clawrl.bench.Task`
with id ``<file stem>-<index:05d>`` (AgentBench's numbering):

* the sandbox image is built from a one-line Dockerfile ``FROM <create.image or
  ubuntu:22.04>`` — no registry here, so the local base (:mod:`clawrl.bench.base_images`);
* ``create.init`` scripts run to completion and ``start`` is started in the background in
  the agent's sandbox before the agent (:func:`run_setup`);
* the **answer channel**: the agent's final answer is the file :data:`~clawrl.bench.ANSWER_PATH`
  if it wrote one, else the harness's last assistant message, whose last ``answer(…)`` (the
  AgentBench action) wins over the whole text (:func:`agent_answer`);
* grading runs in the agent's own sandbox after every agent process was killed
  (:func:`grade_in_sandbox`), as AgentBench does: ``match`` compares the answer (exact, or a
  regular expression), ``check`` runs each script with the arguments ``answer, earlier
  outputs…`` (``null`` = the ``example`` script) and passes iff all exit 0;
* the oracle (``solution``) writes the example's output (or the expected ``match``) to the
  answer file.

Trust: the check scripts are passed as ``-c`` arguments of fresh processes (no file the
agent could have replaced) after ``kill_all``; but they read machine state the agent left,
as in AgentBench. A task whose check needs the ``start`` processes alive cannot pass here
(they are killed with the agent's).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
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
from clawrl.bench.verify import VerifierResult, VerifierStatus
from clawrl.sandbox import Sandbox, SandboxError

__all__ = [
    "agent_answer",
    "grade_in_sandbox",
    "is_agentbench_file",
    "load_agentbench_os",
    "run_setup",
]

DEFAULT_IMAGE = "ubuntu:22.04"
_INSTRUCTION = (
    "{description}\n\nYou work in a Linux shell. When you have the answer, give it as "
    "`answer(YOUR ANSWER)` in your last message, or write it (and nothing else) to the file "
    f"{ANSWER_PATH}. If the task asks for a change to the system, make it and end."
)
_ANSWER_CALL = re.compile(r"answer\((.*)\)", re.DOTALL)
_SCRIPT_TIMEOUT_S = 60.0


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
        if any(c is None for c in check) and example is None:
            raise ValueError(f"{where}: a null check needs an `example`")
        return AnswerGrader(check=check, example=example)
    raise ValueError(f"{where}: `evaluation` needs `match` or `check`")


def _stage(files: dict[str, str]) -> Path:
    """A content-addressed cache directory holding ``files`` (relative path -> text)."""
    data = {rel: text.encode("utf-8") for rel, text in files.items()}
    return stage_files("agentbench", "agentbench-1", data, ("environment", "verifier", "solution"))


def _oracle_script(grader: AnswerGrader) -> str | None:
    """solve.sh: the example's output (or the expected match) into the answer file."""
    write = f"mkdir -p {shlex.quote(str(Path(ANSWER_PATH).parent))}\n"
    if grader.example is not None:
        run = "bash" if grader.example.language == "bash" else "python3"
        ext = "sh" if grader.example.language == "bash" else "py"
        return f"{write}{run} {SOLUTION_MOUNT}/example.{ext} > {ANSWER_PATH}\n"
    if grader.match_answer is not None:
        return f"{write}printf '%s' {shlex.quote(grader.match_answer)} > {ANSWER_PATH}\n"
    return None


def _entry_task(entry: Any, index: int, path: Path, script_dir: Path) -> Task:
    where = f"{path.name}[{index}]"
    if not isinstance(entry, dict) or not isinstance(entry.get("description"), str):
        raise ValueError(f"{where}: an entry needs a `description` string")
    create = entry.get("create") or {}
    if not isinstance(create, dict):
        raise ValueError(f"{where}: `create` must be an object")
    raw_init = create.get("init") or []
    init = [
        _script(s, script_dir, f"{where} init")
        for s in (raw_init if isinstance(raw_init, list) else [raw_init])
    ]
    grader = _grader(entry.get("evaluation"), script_dir, where)
    image = str(create.get("image") or DEFAULT_IMAGE)
    files = {"environment/Dockerfile": f"FROM {image}\n"}
    oracle = _oracle_script(grader)
    if oracle is not None:
        files["solution/solve.sh"] = "#!/bin/bash\n" + oracle
        if grader.example is not None:
            ext = "sh" if grader.example.language == "bash" else "py"
            files[f"solution/example.{ext}"] = grader.example.code
    staged = _stage(files)
    labels = entry.get("labels")
    return Task(
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
    if script.language == "python":
        return ["python3", "-c", script.code, *params]
    return ["bash", "-c", script.code, "--", *params] if params else ["bash", "-c", script.code]


async def run_setup(task: Task, sb: Sandbox) -> str | None:
    """Run ``task``'s init scripts, then start its start script in the background, in
    ``sb``; returns why setup failed (``None`` when it did not).

    Raises:
        SandboxError: the sandbox cannot run commands.
    """
    for i, script in enumerate(task.init_scripts):
        res = await sb.exec(_argv(script, []), timeout=_SCRIPT_TIMEOUT_S, workdir="/root")
        if not res.ok:
            tail = (res.stdout + res.stderr).decode("utf-8", "replace")[-2000:]
            return f"init script {i} exited {res.exit_code}:\n{tail}"
    if task.start_script is not None:
        inner = shlex.join(_argv(task.start_script, []))
        await sb.exec(
            ["bash", "-c", f"nohup setsid {inner} >/dev/null 2>&1 < /dev/null &"],
            timeout=_SCRIPT_TIMEOUT_S,
            workdir="/root",
        )
    return None


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


async def grade_in_sandbox(task: Task, sb: Sandbox, answer: str | None) -> VerifierResult:
    """Grade ``answer`` for ``task`` (which has a :attr:`~clawrl.bench.Task.grader`) in the
    agent's sandbox ``sb``, whose agent processes are already dead. A wrong answer is
    ``ok`` with reward 0 and the reason; a sandbox that cannot run the checks is an
    ``infra-error``.

    Raises:
        ValueError: ``task`` has no grader.
    """
    g = task.grader
    if g is None:
        raise ValueError(f"task {task.id!r} has no answer grader")
    if g.match_answer is not None or g.match_regex is not None:
        got = "" if answer is None else (answer.strip() if g.strip else answer)
        if g.match_answer is not None:
            return _result(got == g.match_answer, f"answer {got[:200]!r} is not the expected one")
        return _result(
            re.search(str(g.match_regex), got) is not None, f"answer {got[:200]!r} does not match"
        )
    params = [answer or ""]
    for i, script in enumerate(g.check):
        run = script if script is not None else g.example
        assert run is not None  # checked at load time
        try:
            res = await sb.exec(_argv(run, params), timeout=_SCRIPT_TIMEOUT_S, workdir="/root")
        except SandboxError as exc:
            return VerifierResult(
                reward=0.0, status=VerifierStatus.INFRA_ERROR, reason=f"check {i}: {exc}"
            )
        if not res.ok:
            return _result(False, f"check {i} exited {res.exit_code} (answer {params[0][:200]!r})")
        params.append(res.stdout.decode("utf-8", "replace"))
    return _result(True, "")
