"""The task-layout protocol: how tasks written for one benchmark are found, loaded,
set up in the agent's sandbox and graded.

A :class:`TaskLayout` *describes*; the loader (:func:`~clawrl.bench.load_task`,
:func:`~clawrl.bench.load_suite`), the rollout runner and the verifier *execute*, and know
a layout only through these methods:

- :meth:`~TaskLayout.detect` / :meth:`~TaskLayout.load`: a task directory of this layout,
  and the :class:`~clawrl.bench.Task` it is (built with :func:`make_task`). The task's
  oracle is its :attr:`~clawrl.bench.Task.solution`, set by ``load``;
- :meth:`~TaskLayout.detect_suite` / :meth:`~TaskLayout.load_suite`: a suite directory
  that holds no task directory but files of this layout (AgentBench OS);
- :meth:`~TaskLayout.finish`: the suite's tasks of this layout once all are loaded (the
  ClawGym image is built from the imports of all of them);
- :meth:`~TaskLayout.prepare`: the task's own setup in the agent's sandbox before the
  agent starts (AgentBench's init and start scripts);
- :meth:`~TaskLayout.grade`: a verdict taken in the agent's own sandbox after the agent
  phase, instead of the verifier (AgentBench's answer checks); ``None``: the task's
  verifier (:attr:`~clawrl.bench.Task.verifier`) scores the workspace;
- :meth:`~TaskLayout.subscores`: sub-scores from the JSON a ``stdout``-channel verifier
  prints (ClawGym's checkers).

Every method but ``detect`` and ``load`` has a default that does nothing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clawrl.bench.task import Layout, Task, VerifierSpec

if TYPE_CHECKING:
    from clawrl.bench.verify import VerifierResult
    from clawrl.sandbox import PinnedSession, Sandbox

__all__ = ["SetupResult", "TaskLayout", "make_task"]


@dataclass(frozen=True)
class SetupResult:
    """What :meth:`TaskLayout.prepare` did: why it failed (``None``: it did not; a failure
    is the task's, an ``env-error``), the sessions of the task's own processes that must
    survive the agent phase, and the expected answer that :meth:`TaskLayout.grade`
    compares the agent's with (AgentBench: the ``example``'s output, before the agent).
    Held by the caller, on the host: the agent never sees nor changes it."""

    error: str | None = None
    sessions: tuple[PinnedSession, ...] = ()
    expected: str | None = None


def make_task(
    *,
    layout: Layout | str,
    root: Path,
    id: str,
    instruction: str,
    verifier: VerifierSpec,
    category: Any = None,
    difficulty: Any = None,
    **fields: Any,
) -> Task:
    """The one place a :class:`~clawrl.bench.Task` is built from a layout's files:
    ``category`` and ``difficulty`` are kept only when they are strings (free text in
    imported layouts), every other field of :class:`~clawrl.bench.Task` is passed as is.

    Raises:
        pydantic.ValidationError: a field is invalid (the loader reports it as a
            :class:`~clawrl.bench.TaskLoadError` naming the field).
    """
    return Task(
        id=id,
        instruction=instruction,
        category=category if isinstance(category, str) else None,
        difficulty=difficulty if isinstance(difficulty, str) else None,
        layout=layout,
        root=root,
        verifier=verifier,
        **fields,
    )


class TaskLayout(ABC):
    """One task layout (see the module docstring). ``name`` is what
    :attr:`~clawrl.bench.Task.layout` holds for its tasks and what
    :func:`~clawrl.bench.tasks.get_layout` finds it by; a layout without a ``name`` takes
    the name it was asked by."""

    name: str = ""

    @abstractmethod
    def detect(self, path: Path) -> bool:
        """Whether the directory ``path`` is one task of this layout.

        Raises:
            TaskLoadError: it is, but a file that says so cannot be read.
        """

    @abstractmethod
    def load(self, path: Path) -> Task:
        """The task in the directory ``path`` (absolute), built with :func:`make_task`.

        Raises:
            TaskLoadError: the directory is not a valid task; ``reason`` says why.
        """

    def detect_suite(self, path: Path) -> bool:
        """Whether the directory ``path``, which holds no task directory, is a suite of
        this layout's files. Default: never."""
        return False

    def load_suite(self, path: Path) -> list[Task]:
        """Every task of the suite directory ``path`` (:meth:`detect_suite`).

        Raises:
            TaskLoadError: a task failed to load.
        """
        raise NotImplementedError(f"layout {self.name!r} has no suite files")

    def finish(self, tasks: list[Task]) -> list[Task]:
        """``tasks`` (this layout's, of one suite or one task) once all are loaded, in the
        same order. Default: unchanged."""
        return tasks

    async def prepare(self, task: Task, sandbox: Sandbox, *, built: bool) -> SetupResult:
        """Set ``task`` up in the agent's ``sandbox`` before the agent starts (``built``:
        the sandbox runs the task's built image). Default: nothing to do.

        Raises:
            SandboxError: the sandbox cannot run commands.
        """
        return SetupResult()

    async def grade(
        self, task: Task, sandbox: Sandbox, logs: Mapping[str, str], setup: SetupResult
    ) -> VerifierResult | None:
        """The verdict on ``task`` taken in the agent's own ``sandbox`` once every agent
        process is dead (``logs``: the harness's logs; ``setup``: what :meth:`prepare`
        returned), or ``None``: the task's verifier scores the workspace. Default: ``None``."""
        return None

    def subscores(self, text: str) -> tuple[dict[str, float], list[str]]:
        """Sub-scores in [0, 1] from the JSON a ``stdout``-channel verifier wrote before its
        reward line (``text``), and notes on what was skipped. Default: none."""
        return {}, []
