"""Helpers of the rollout runner (:mod:`clawrl.bench.runner`): closing a lost session,
collecting harness logs, the outcome of a refused workspace, verification that never
raises, and a verified rollout's result."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from clawrl.bench.executors import Executor
from clawrl.bench.rollout_types import RolloutOptions, RolloutResult, RolloutStatus
from clawrl.bench.task import Task
from clawrl.bench.verify import VerifierResult, VerifierStatus, verify
from clawrl.bench.workspace_diff import FileChange
from clawrl.proxy import AsyncAdminClient, ProxyError, SessionInfo
from clawrl.sandbox import Sandbox, SandboxCopyLimitError, SandboxState

__all__: list[str] = []


async def _close_quietly(admin: AsyncAdminClient | None, session: SessionInfo | None) -> None:
    """Close a session whose rollout failed (errors ignored: the rollout is already lost)."""
    if session is not None and admin is not None:
        with contextlib.suppress(ProxyError, OSError):
            await admin.close_session(session.session_id)


async def _collect_logs(sb: Sandbox, paths: Mapping[str, str], cap: int) -> dict[str, str]:
    """The harness's log files (missing ones left out), each cut to ``cap`` bytes."""
    logs: dict[str, str] = {}
    for name, path in paths.items():
        try:
            data = await sb.get_file(path, max_bytes=4 * cap)
        except FileNotFoundError:
            continue
        except SandboxCopyLimitError as exc:
            data = f"[log not collected: {exc}]".encode()
        logs[name] = _cap(data.decode("utf-8", errors="replace"), cap)
    return logs


def _refused(reason: str, res: Any) -> dict[str, Any]:
    """The harness outcome of a rollout whose workspace is not verified (scored as 0);
    ``res`` is the harness's exec result (``None``: the harness never ran)."""
    return {
        "status": RolloutStatus.HARNESS_ERROR,
        "reason": reason,
        "end_reason": "refused",
        "turns": None,
        "exit_code": None if res is None or res.timed_out else res.exit_code,
        "stdout": "" if res is None else res.stdout.decode("utf-8", errors="replace"),
        "stderr": "" if res is None else res.stderr.decode("utf-8", errors="replace"),
        "logs": {},
        "refused": True,
    }


def _verify_never_raises(
    task: Task, final: Path, executor: Executor, state: SandboxState | None = None
) -> VerifierResult:
    """:func:`verify`, with anything it raises (a bug, an unexpected host error) turned into
    a ``verifier-error`` result, so that one workspace never crashes a batch."""
    try:
        return verify(task, final, executor, state)
    except Exception as exc:
        return VerifierResult(
            reward=0.0,
            status=VerifierStatus.ERROR,
            reason=f"verification failed: {type(exc).__name__}: {str(exc)[:500]}",
        )


#: Statuses whose rollout carries its verifier's reward.
_REWARDED = (RolloutStatus.OK, RolloutStatus.TIMEOUT)


def _result(
    base: dict[str, Any],
    harness_out: dict[str, Any],
    verdict: VerifierResult,
    session: SessionInfo | None,
    records: list[dict[str, Any]],
    diff: list[FileChange],
    timing: dict[str, float],
    opts: RolloutOptions,
) -> RolloutResult:
    """A verified rollout's result: the harness outcome, overruled by a verifier failure.
    Its reward is the verifier's when the rollout is ``ok`` or timed out (its workspace is
    verified all the same, as Harbor and Terminal-Bench do); a rollout whose harness failed
    (an oracle with no solution), whose context overflowed or whose verifier failed scores
    0."""
    status, reason = harness_out["status"], harness_out["reason"]
    if verdict.status is VerifierStatus.INFRA_ERROR:
        status, reason = RolloutStatus.INFRA_ERROR, f"verifier: {verdict.reason}"
    elif status is RolloutStatus.OK and not verdict.ok:
        status, reason = RolloutStatus.VERIFIER_ERROR, f"{verdict.status}: {verdict.reason}"
    return RolloutResult(
        **base,
        status=status,
        reason=reason,
        excluded=bool(harness_out.get("excluded")) and status is harness_out["status"],
        # any other status scores 0, whatever its verifier gave (kept in `verifier`)
        reward=verdict.reward if status in _REWARDED else 0.0,
        subscores=dict(verdict.subscores) if status in _REWARDED else {},
        verifier=verdict,
        session_id=session.session_id if session else "",
        records=records if opts.keep_records else [],
        n_calls=len(records),
        end_reason=harness_out["end_reason"],
        turns=harness_out["turns"],
        exit_code=harness_out["exit_code"],
        stdout=harness_out["stdout"],
        stderr=harness_out["stderr"],
        logs=harness_out["logs"],
        workspace_diff=diff,
        outside_changes=harness_out.get("outside_changes", []),
        timing=timing,
    )


def _left_running(verdict: VerifierResult, left: list[str]) -> VerifierResult:
    """A verdict on a snapshot of the agent's container, below full marks, while the agent
    left processes running (daemons it started: ``left``), is a ``verifier-error`` that
    names them: the verifier's fresh sandbox runs none of them, so checks that need a
    service the agent started cannot pass there (Harbor verifies in the live container).
    Scored 0 all the same. A full-marks verdict, or one that is already an error, stays."""
    if not left or not verdict.ok or verdict.reward >= 1.0:
        return verdict
    counts = Counter(left)
    shown = ", ".join(f"{n} ×{c}" if c > 1 else n for n, c in sorted(counts.items())[:8])
    reason = (
        f"not verifiable on a snapshot: the agent left {len(left)} processes running "
        f"({shown}), which the verifier's fresh sandbox does not run; its checks scored "
        f"{verdict.reward:g}" + (f" ({verdict.reason})" if verdict.reason else "")
    )
    return verdict.model_copy(
        update={"reward": 0.0, "status": VerifierStatus.ERROR, "reason": reason}
    )


def _outside_changes(state: SandboxState, workspace_path: str) -> list[str]:
    """``"<kind> <path>"`` of each change of the agent's container ``state`` outside the
    workspace (the workspace's own are the workspace diff)."""
    ws = PurePosixPath(workspace_path)
    out = []
    for kind, path in state.changes:
        p = PurePosixPath(path)
        if p != ws and ws not in p.parents:
            out.append(f"{kind} {path}")
    return out


def _cap(text: str, cap: int) -> str:
    if len(text) <= cap:
        return text
    half = cap // 2
    return text[:half] + f"\n...[{len(text) - cap} characters cut]...\n" + text[-half:]
