"""The rollout runner's data types: what a rollout is (:class:`RolloutSpec`), how it runs
(:class:`RolloutOptions`), what it gave (:class:`RolloutResult`, :class:`RolloutStatus`) and
the progress reports (:class:`RolloutEvent`). Re-exported by :mod:`clawrl.bench.runner`.

Statuses: ``ok`` (the harness ended by itself or at its turn limit, and the verifier gave
a reward), ``timeout`` (the harness was killed at the agent timeout; still verified),
``harness-error`` (the harness failed; still verified — or its processes could not be
stopped, or its workspace hit a copy-out bound: then not verified, reward 0), ``verifier-error`` (a missing or
garbled reward, or a verifier timeout; reward 0), ``infra-error`` (sandbox, proxy or
runtime failure: retried up to ``retries`` times with a new sandbox and session, then
reported and excluded from scores), ``context-overflow`` (a model call was refused because
its prompt does not fit the context window, and the harness got no answer after it),
``env-error`` (the task's image could not be built:
the task's fault, not the agent's; not retried, excluded from scores and counted; the
reason holds the build log's tail).

A rollout whose harness failed before the policy had a say (no answered model call, the
harness's own prompt over the context window, killed at the timeout before its first call)
is ``excluded``: left out of scores and GRPO groups and counted apart
(:mod:`clawrl.bench.rollout_health` has the exact rule).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from clawrl.bench.harness import HarnessAdapter
from clawrl.bench.metrics import ScoredRollout, is_scored
from clawrl.bench.task import Task
from clawrl.bench.verify import VerifierResult
from clawrl.bench.workspace_diff import FileChange
from clawrl.proxy import SessionInfo
from pydantic import BaseModel, ConfigDict, Field

#: The one default turn / step limit of a rollout (bench's ``max_turns``, train's
#: ``rollout.max_turns``): every built-in task's oracle takes 3 model calls (two tool calls
#: and the final answer), so 8 leaves a model room for failed attempts and checks while a
#: model that never stops calling tools costs at most 8 calls per rollout.
DEFAULT_MAX_TURNS = 8

__all__ = [
    "DEFAULT_MAX_TURNS",
    "ProgressCallback",
    "RolloutEvent",
    "RolloutOptions",
    "RolloutResult",
    "RolloutSpec",
    "RolloutStatus",
    "SessionHook",
    "rollout_sampling_seed",
]


class RolloutStatus(StrEnum):
    """How a rollout ended (see the module docstring)."""

    OK = "ok"
    TIMEOUT = "timeout"
    HARNESS_ERROR = "harness-error"
    VERIFIER_ERROR = "verifier-error"
    INFRA_ERROR = "infra-error"
    ENV_ERROR = "env-error"
    CONTEXT_OVERFLOW = "context-overflow"


class RolloutOptions(BaseModel):
    """Knobs of a batch of rollouts (every value has a default).

    Attributes:
        max_turns: the harness's turn / step limit.
        max_tokens: per-call output cap the harness requests (``None``: its default; the
            proxy clamps to the context window).
        agent_timeout_s: wall-clock limit of the harness process (``None``: the task's
            ``timeouts.agent_s``).
        retries: extra attempts after an infrastructure failure (never after any other).
        model: model name harnesses send.
        memory_mb: sandbox memory override (``None``: the task's ``limits.memory_mb``);
            covers processes and the tmpfs workspace.
        log_cap_bytes: cap per collected harness log and on the harness's stdout/stderr.
        diff_cap_bytes: text files up to this size get a unified diff.
        keep_records: include the session's call records in each result.
        task_images: build each task's Dockerfile (Harbor ``environment/Dockerfile``) into
            the image its agent and verifier sandboxes run (:mod:`clawrl.bench.task_image`);
            ``False``: every task runs in the default root (the host's ``/usr``).
        agent_network: give the agent phase of tasks that declare a network (Harbor
            ``allow_internet``, Terminal-Bench 1's compose network) podman's ``bridge``
            network — what the host reaches (here: the package registries); for trusted
            tasks only. ``False`` (default): the agent reaches only the model socket.
        timeout_reference_tps: the decode speed (tokens/s) agent timeouts are meant for:
            on a slower backend (measured at the start of each batch) they grow by the
            ratio, up to ``timeout_max_scale`` times (:mod:`clawrl.bench.timeouts`);
            ``None``: never scaled.
        timeout_max_scale: the most an agent timeout is multiplied by.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_turns: int = Field(default=DEFAULT_MAX_TURNS, ge=1)
    max_tokens: int | None = Field(default=None, ge=1)
    agent_timeout_s: float | None = Field(default=None, gt=0)
    retries: int = Field(default=1, ge=0)
    model: str = "policy"
    memory_mb: int | None = Field(default=None, ge=64)
    log_cap_bytes: int = Field(default=256 * 1024, ge=1024)
    diff_cap_bytes: int = Field(default=64 * 1024, ge=0)
    keep_records: bool = True
    task_images: bool = True
    agent_network: bool = False
    timeout_reference_tps: float | None = Field(default=20.0, gt=0)
    timeout_max_scale: float = Field(default=10.0, ge=1)


@dataclass(frozen=True)
class RolloutSpec:
    """One rollout to run: a task, a harness, its sample index and group.

    ``sampling_seed``: the seed of the rollout's proxy session (see
    ``clawrl.proxy.Session``): its calls draw from a stream of their own, whatever the
    machine load or the order in which concurrent rollouts' requests arrive. ``None``: the
    backend's own generator.
    """

    task: Task
    harness: HarnessAdapter
    sample_index: int = 0
    group_id: str = ""
    rollout_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    sampling_seed: int | None = None


def rollout_sampling_seed(seed: int, group_id: str, sample_index: int) -> int:
    """The session seed of sample ``sample_index`` of group ``group_id`` in a run seeded
    with ``seed``: the first 63 bits of SHA-256 of ``"<seed>/<group_id>/<sample_index>"``."""
    digest = hashlib.sha256(f"{seed}/{group_id}/{sample_index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


class RolloutResult(BaseModel):
    """Everything recorded about one rollout (JSON-serialisable with ``model_dump``).

    Attributes:
        rollout_id, task_id, category, difficulty, harness, group_id, sample_index: identity.
        status: :class:`RolloutStatus` value; ``reason`` says why it is not ``ok``.
        excluded: a harness-health failure the policy did not cause
            (:mod:`clawrl.bench.rollout_health`): left out of scores and GRPO groups, like
            ``infra-error`` and ``env-error`` (see :attr:`counts`).
        reward: the verifier's reward in [0, 1] when the rollout is ``ok``; 0 otherwise (the
            verifier's own result stays in :attr:`verifier`).
        subscores: the verifier's named sub-scores when the rollout is ``ok`` (else empty).
        verifier: the full verifier result (``None`` if verification did not run).
        attempts: attempts made (> 1 after infrastructure retries).
        session_id: the proxy session of the final attempt (``""`` without a model).
        records: the session's call records (docs/architecture.md, "Call record"), in order.
        n_calls: number of call records.
        end_reason: the harness's end (``final_answer``, ``turn_limit``, ``submitted``, ...).
        turns: model turns the harness reports.
        exit_code: the harness process's exit status (``None`` if it did not run / was
            killed at the timeout).
        stdout / stderr: the harness's output, capped.
        logs: the harness's own logs by name (text, capped).
        workspace_diff: files added / changed / removed vs the initial workspace.
        outside_changes: the paths the agent changed outside the workspace, each
            ``"A <path>"`` (added), ``"C <path>"`` (a changed file or link) or
            ``"D <path>"`` (deleted), lossless printable text
            (:func:`clawrl.sandbox.printable_name`); recorded for tasks whose verifier sees
            the agent's whole container (``VerifierSpec.verify_on_snapshot``), else empty.
        timing: seconds per phase (``setup``, ``harness``, ``collect``, ``verify``, ``total``)
            and ``started`` / ``verify_started`` / ``finished`` (unix time).
    """

    model_config = ConfigDict(frozen=True)

    rollout_id: str
    task_id: str
    category: str | None = None
    difficulty: str | None = None
    harness: str
    group_id: str
    sample_index: int
    status: RolloutStatus
    reason: str = ""
    excluded: bool = False
    reward: float = Field(default=0.0, ge=0.0, le=1.0)
    subscores: dict[str, float] = Field(default_factory=dict)
    verifier: VerifierResult | None = None
    attempts: int = 1
    session_id: str = ""
    records: list[dict[str, Any]] = Field(default_factory=list)
    n_calls: int = 0
    end_reason: str = ""
    turns: int | None = None
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    logs: dict[str, str] = Field(default_factory=dict)
    workspace_diff: list[FileChange] = Field(default_factory=list)
    outside_changes: list[str] = Field(default_factory=list)
    timing: dict[str, float] = Field(default_factory=dict)

    @property
    def counts(self) -> bool:
        """Whether the rollout counts in scores and GRPO groups: neither ``infra-error`` nor
        ``env-error`` nor :attr:`excluded`."""
        return is_scored(self.status.value, self.excluded)

    def scored(self) -> ScoredRollout:
        """The part :func:`~clawrl.bench.aggregate` needs."""
        return ScoredRollout(
            task_id=self.task_id,
            category=self.category,
            harness=self.harness,
            reward=self.reward,
            status=self.status.value,
            excluded=self.excluded,
        )


@dataclass(frozen=True)
class RolloutEvent:
    """A progress report: ``kind`` is ``started``, ``retry`` or ``finished``; ``done`` /
    ``total`` count finished rollouts of the batch; ``result`` is set for ``finished`` (and
    is the failed attempt for ``retry``)."""

    kind: Literal["started", "retry", "finished", "message"]
    spec: RolloutSpec | None
    done: int
    total: int
    result: RolloutResult | None = None
    message: str = ""


ProgressCallback = Callable[[RolloutEvent], None]
SessionHook = Callable[[SessionInfo, RolloutSpec], Awaitable[None]]
