"""The task model shared by every task layout (the five of :mod:`clawrl.bench.tasks`:
built-in, Harbor, Terminal-Bench 1, ClawGym, AgentBench OS; and those of plug-ins).

A :class:`Task` says everything the rollout runner needs to know about a task directory,
independent of the layout it was loaded from:

* where the agent's workspace lives inside the sandbox (``workspace_path``) and which host
  files are placed in it before the agent starts (``workspace_sources``);
* the verifier (``verifier``): trusted host files, where they are mounted at verification
  time, the command to run and where the reward comes from;
* the oracle (``solution``), if the task ships one;
* timeouts, resource limits and whether the network is allowed.

Paths named ``*_path`` / ``mount_path`` are *in-sandbox* absolute POSIX paths; ``Path``
fields are host paths.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "ANSWER_PATH",
    "CATEGORIES",
    "DIFFICULTIES",
    "UNPRIVILEGED_USER",
    "AnswerGrader",
    "Layout",
    "Script",
    "SolutionSpec",
    "Task",
    "TaskLimits",
    "Timeouts",
    "VerifierSpec",
    "WorkspaceSource",
    "withhold_network",
]

#: The six categories of ClawGym-Bench (short key -> label), used by the built-in suite.
CATEGORIES: dict[str, str] = {
    "productivity": "productivity & collaboration",
    "systems": "systems & automation",
    "analysis": "analysis & reasoning",
    "content": "content & domain",
    "planning": "planning & knowledge",
    "software": "software development",
}

#: Difficulty levels of the built-in suite, easiest first.
DIFFICULTIES: tuple[str, ...] = ("easy", "medium", "hard")

#: Where verifier files are mounted at verification time (Harbor's convention).
TESTS_MOUNT = "/tests"
#: Fresh, empty directory the verifier writes its reward into (Harbor's convention).
REWARD_MOUNT = "/logs/verifier"
#: The unprivileged ``uid:gid`` (nobody / nogroup) a third-party verifier that needs no
#: root runs as (:attr:`VerifierSpec.user`).
UNPRIVILEGED_USER = "65534:65534"
#: Where oracle solution files are mounted when the oracle runs.
SOLUTION_MOUNT = "/solution"
#: The answer channel: a file an agent (or the oracle) may write its final answer to; else
#: the answer is read from the harness's last assistant message (AgentBench OS tasks).
ANSWER_PATH = "/run/clawrl/answer"


class Layout(StrEnum):
    """The built-in layouts a task may be loaded from (:mod:`clawrl.bench.tasks`); a layout
    brought by a plug-in is named by a plain string."""

    BUILTIN = "builtin"
    HARBOR = "harbor"
    TB1 = "terminal-bench-1"
    AGENTBENCH_OS = "agentbench-os"
    CLAWGYM = "clawgym"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Timeouts(_Frozen):
    """Wall-clock limits in seconds (Harbor defaults: 600 s agent and verifier); ``build_s``
    bounds the build of the task's image (Harbor ``[environment] build_timeout_sec``)."""

    agent_s: float = Field(default=600.0, gt=0)
    verifier_s: float = Field(default=600.0, gt=0)
    build_s: float = Field(default=1800.0, gt=0)


class TaskLimits(_Frozen):
    """Sandbox resource limits (Harbor defaults: 1 CPU, 2048 MB memory)."""

    cpus: float = Field(default=1.0, gt=0)
    memory_mb: int = Field(default=2048, gt=0)
    storage_mb: int = Field(default=10240, gt=0)
    pids: int = Field(default=512, gt=0)


class WorkspaceSource(_Frozen):
    """A host file or directory copied into the workspace before the agent starts.

    ``dest`` is relative to the workspace root (``"."`` = the root itself); a directory
    source has its *contents* copied under ``dest``.
    """

    src: Path
    dest: str = "."


class VerifierSpec(_Frozen):
    """How to verify a finished workspace.

    Attributes:
        files_dir: host directory of trusted verifier files (never shown to the agent).
        mount_path: in-sandbox path where a fresh copy of ``files_dir`` is placed at
            verification time (``/tests``; ClawGym: ``<input_mount_dir>/reward``).
        command: argv run with the workspace as working directory (in-sandbox paths).
        reward_channel: ``"file"``: the verifier writes ``reward.txt`` (one number; wins
            when present) and/or ``reward.json`` (an object: ``reward`` plus sub-scores, or
            only sub-scores whose mean is the reward) into :data:`REWARD_MOUNT`;
            ``"stdout"``: the last stdout line is the reward and the last stdout line that
            is a JSON object holds the sub-scores (ClawGym's ``reward.sh``); ``"pytest"``:
            the JUnit XML reports of the pytest runs that went through clawrl's trusted
            runner (needs ``trusted_runner``), reward 1 iff at least one test was executed
            and every executed test passed (Terminal-Bench 1,
            :mod:`clawrl.bench.verdict_reports`).
        env: extra environment variables (in-sandbox paths).
        subscores_file: a file the verifier writes into :data:`REWARD_MOUNT` holding its
            checker's JSON (ClawGym: ``checker.json``), mapped to sub-scores by
            :func:`clawrl.bench.tasks.clawgym.checker_subscores`; with the ``"stdout"`` channel it
            replaces the JSON printed on stdout. ``None``: none.
        executes_workspace_code: whether the verifier runs code from the workspace (the
            agent's module, script or program) rather than only reading its files. Such a
            verifier is never run on the host (:class:`~clawrl.bench.HostVerificationError`).
            Default ``True``: a layout that cannot tell is assumed to.
        trusted_runner: run the verifier's ``bash`` with clawrl's verifier environment
            (``BASH_ENV``): ``pytest`` and ``python[3] -m pytest`` go through clawrl's
            runner (``python -I``, ``--junitxml`` into the reward directory), a command
            that the top-level script cannot find is recorded, and a workspace entry that
            would shadow the runner's modules is tampering. The loader stages the runner
            into ``files_dir`` (``.clawrl/``) and sets the environment.
        user: ``"uid:gid"`` the verifier's command runs as, under the sandbox executor's
            root supervisor (the workspace copy, the reward directory and the verifier's
            files are that user's); ``None``: root (a verifier that installs packages or
            drops privileges for agent code itself). ClawGym: :data:`UNPRIVILEGED_USER`.
        verify_on_snapshot: the verifier sees the agent's whole container, as the layout's
            own harness verifies (Harbor, Terminal-Bench 1): the rollout runner records
            what the agent changed outside the workspace (files, deletions, ``/tmp``, the
            home directory) once every agent process is dead, and the verifier runs in a
            fresh sandbox of the task's image with that state restored, its own files
            bound read-only and a fresh reward directory. ``False``: the verifier sees the
            workspace only.
    """

    files_dir: Path
    mount_path: str = TESTS_MOUNT
    command: tuple[str, ...]
    reward_channel: Literal["file", "stdout", "pytest"] = "file"
    env: dict[str, str] = Field(default_factory=dict)
    subscores_file: str | None = Field(default=None, pattern=r"^[\w.-]+$")
    executes_workspace_code: bool = True
    trusted_runner: bool = False
    user: str | None = Field(default=None, pattern=r"^\d+(:\d+)?$")
    verify_on_snapshot: bool = False


class SolutionSpec(_Frozen):
    """The oracle: files mounted read-only at ``mount_path`` and a command run in the workspace."""

    files_dir: Path
    mount_path: str = SOLUTION_MOUNT
    command: tuple[str, ...]


class Script(_Frozen):
    """A script run in a sandbox: ``bash -c CODE -- ARGS`` or ``python3 -c CODE ARGS``."""

    language: Literal["bash", "python"] = "bash"
    code: str


class AnswerGrader(_Frozen):
    """AgentBench OS grading of the agent's final answer, run in the agent's own sandbox
    after every agent process is killed (:mod:`clawrl.bench.tasks.agentbench_os`).

    Attributes:
        match_answer: exact match with the (stripped, if ``strip``) answer.
        match_regex: the answer matches this regular expression (``re.search``).
        strip: strip the answer before matching.
        check: scripts run in turn with the arguments ``answer, output 1, …``; each must exit
            0; ``None`` stands for ``example``'s output. Passing all of them is reward 1.
        example: the reference script; its output is the expected answer of a ``None``
            check, computed before the agent runs (after the init and start scripts) and
            kept on the host, so the agent cannot change what it counts.
    """

    match_answer: str | None = None
    match_regex: str | None = None
    strip: bool = True
    check: tuple[Script | None, ...] = ()
    example: Script | None = None


class Task(_Frozen):
    """One task, whatever its layout. Build it with :func:`clawrl.bench.load_task`.

    Attributes:
        id: unique task id (built-in: ``task.toml`` id; Harbor: directory name; ClawGym:
            ``task_id``).
        instruction: the prompt given to the harness.
        category: one of :data:`CATEGORIES` for built-in tasks; free text (or ``None``)
            for imported layouts.
        difficulty: ``easy`` | ``medium`` | ``hard`` for built-in tasks; free text or ``None``.
        layout: the layout the task was read from: a :class:`Layout` for the built-in
            ones, else the name of the plug-in layout (:func:`clawrl.bench.tasks.get_layout`).
        root: host path of the task directory.
        workspace_path: in-sandbox absolute path of the agent's workspace (built-in:
            ``/workspace``; Harbor: the Dockerfile's last ``WORKDIR``, default ``/app``;
            ClawGym: ``input_mount_dir``).
        workspace_sources: host files placed in the workspace before the agent starts.
        network: whether the task declares a network for its sandboxes (built-in tasks:
            never; Harbor: unless ``allow_internet = false``); a run-level policy may
            withhold it (:func:`clawrl.bench.withhold_network`).
        network_withheld: the task declares a network that the run denied; a verdict
            below full marks is then a ``verifier-error`` naming the network.
        image: container image the layout asks for (Harbor ``FROM``), informational.
        setup_commands: Dockerfile ``RUN`` lines (run by the image build, see ``dockerfile``).
        dockerfile: host path of the task's Dockerfile (Harbor ``environment/Dockerfile``;
            its directory is the build context), built by the rollout runner into the
            image the agent and the verifier run in (:mod:`clawrl.bench.task_image`);
            ``None``: the default sandbox root.
        init_scripts: run to completion in the agent's sandbox before the agent starts
            (AgentBench ``create.init``); one that fails makes the rollout an ``env-error``.
        start_script: started in the background in the agent's sandbox before the agent
            (AgentBench ``start``).
        grader: grade the agent's answer in its own sandbox instead of running
            ``verifier`` (AgentBench OS).
        build_context: the image build's context (``None``: the Dockerfile's directory;
            Terminal-Bench 1: the task directory, from ``docker-compose.yaml``).
        env: environment variables for the agent's sandbox (Dockerfile ``ENV``, ``$VAR``
            expanded as far as the Dockerfile says; a built image's own ``Env`` replaces it).
        notes: what the loader could not honour (e.g. a ``COPY`` outside the workspace).
        metadata: layout-specific extra fields, kept verbatim.
    """

    id: str = Field(min_length=1)
    instruction: str = Field(min_length=1)
    category: str | None = None
    difficulty: str | None = None
    layout: Layout | str
    root: Path
    workspace_path: str = "/workspace"
    workspace_sources: tuple[WorkspaceSource, ...] = ()
    timeouts: Timeouts = Timeouts()
    limits: TaskLimits = TaskLimits()
    network: bool = False
    network_withheld: bool = False
    verifier: VerifierSpec
    solution: SolutionSpec | None = None
    image: str | None = None
    setup_commands: tuple[str, ...] = ()
    dockerfile: Path | None = None
    build_context: Path | None = None
    init_scripts: tuple[Script, ...] = ()
    start_script: Script | None = None
    grader: AnswerGrader | None = None
    env: dict[str, str] = Field(default_factory=dict)
    notes: tuple[str, ...] = ()
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("layout", mode="before")
    @classmethod
    def _builtin_layout(cls, value: Any) -> Any:
        """A built-in layout's name as its :class:`Layout` member."""
        return Layout(value) if value in Layout._value2member_map_ else value

    @property
    def verifier_executes_workspace_code(self) -> bool:
        """Whether the verifier runs workspace (agent-written) code; such tasks are only
        verified in a sandbox. Built-in tasks say so in ``task.toml``
        (``verifier_executes_workspace_code``, default true); Harbor and ClawGym tasks
        always count as doing so."""
        return self.verifier.executes_workspace_code

    @property
    def category_label(self) -> str | None:
        """Long category name for the six built-in categories, else ``category`` itself."""
        if self.category is None:
            return None
        return CATEGORIES.get(self.category, self.category)


def withhold_network(tasks: Iterable[Task]) -> list[Task]:
    """A run-level policy that denies every network: ``tasks`` with ``network`` off, and
    ``network_withheld`` set on those that declared one (their verdicts below full marks
    are then ``verifier-error`` naming the network, never a score of 0)."""
    return [
        t.model_copy(update={"network": False, "network_withheld": True}) if t.network else t
        for t in tasks
    ]
