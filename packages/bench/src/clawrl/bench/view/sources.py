"""Reading a run folder for the viewer: a ``bench`` run or a ``train`` run, into one shape.

A **bench run** holds ``results.json`` (every rollout with its call records, verifier result,
workspace diff and harness logs) and ``config.json``. A **train run** (rl-core's loop) holds
``metrics.jsonl`` (one row per RL step, evaluation and cold-start SFT step), ``config.json``,
``capture/<run_id>/<session_id>.jsonl`` (the proxy's call records of every rollout, each
carrying its session metadata: task, harness, group ``s<step>/…`` or ``eval-<tag>/…``,
rollout id) and, where the loop writes them, ``rollouts/step-NNNN.jsonl`` (one line per
rollout: status, reward, sub-scores, verifier, workspace diff, advantage).

Either way the viewer gets a :class:`ViewRun`: its rollouts as :class:`ViewRollout`
(records sorted by ``seq``), the metrics rows, the configuration, and the model directory
its token ids decode with (``None`` when it cannot be found).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

__all__ = ["ViewRollout", "ViewRun", "load_run"]

_STEP_GROUP = re.compile(r"^s(\d+)/")
_EVAL_GROUP = re.compile(r"^eval-([^/]+)/")


@dataclass
class ViewRollout:
    """One rollout as the viewer shows it.

    Attributes:
        id: rollout id (bench's ``rollout_id``; a train run's session metadata ``rollout_id``,
            else the session id).
        task_id, harness, group_id, sample_index: identity.
        step: RL step (1-based, as in ``metrics.jsonl``) of a train rollout; ``None`` else.
        phase: ``bench``, ``train`` or ``eval-<tag>``.
        status, reason, reward, subscores, verifier, workspace_diff, end_reason, timing:
            what the run recorded (``reward`` is ``None`` where it recorded none).
        advantage: the rollout's recorded advantage (``None``: the run recorded none).
        tokens: a train rollout's trained tokens per trajectory (by leaf call id), as the
            update saw them: ``position``, ``advantage``, ``importance_weight``, ... lists
            (rl-core's ``rollouts/step-NNNN.jsonl``); empty for a bench run.
        transcript: the conversation the harness logged (``{"role", "text"}``).
        records: the call records, by ``seq``.
    """

    id: str
    task_id: str
    harness: str
    group_id: str
    sample_index: int = 0
    step: int | None = None
    phase: str = "bench"
    status: str = ""
    reason: str = ""
    reward: float | None = None
    subscores: dict[str, float] = field(default_factory=dict)
    verifier: dict[str, Any] | None = None
    workspace_diff: list[dict[str, Any]] = field(default_factory=list)
    end_reason: str = ""
    timing: dict[str, float] = field(default_factory=dict)
    advantage: float | None = None
    tokens: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    transcript: list[dict[str, str]] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ViewRun:
    """A run folder read for the viewer (see the module docstring)."""

    path: Path
    kind: str  # "bench" | "train"
    rollouts: list[ViewRollout]
    metrics: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    model_dir: Path | None = None


def load_run(run_dir: str | Path) -> ViewRun:
    """Read a bench or train run folder.

    Raises:
        FileNotFoundError: the folder holds neither ``results.json`` nor ``metrics.jsonl`` /
            ``capture/``.
    """
    path = Path(run_dir)
    if (path / "results.json").is_file():
        return _bench_run(path)
    if (path / "metrics.jsonl").is_file() or (path / "capture").is_dir():
        return _train_run(path)
    raise FileNotFoundError(f"{path}: neither a bench run (results.json) nor a train run")


def _read_json(path: Path) -> Any:
    try:
        return orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL file; unreadable lines (a torn last line) are skipped."""
    rows = []
    try:
        lines = path.read_bytes().splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _transcript(r: dict[str, Any]) -> list[dict[str, str]]:
    from clawrl.bench.report import transcript_messages
    from clawrl.bench.runner import RolloutResult

    try:
        return transcript_messages(RolloutResult.model_validate(r))
    except ValueError:
        return []


def _bench_run(path: Path) -> ViewRun:
    doc = _read_json(path / "results.json") or {}
    meta = doc.get("meta") or {}
    config = doc.get("config") or _read_json(path / "config.json") or {}
    rollouts = [_bench_rollout(r) for r in doc.get("rollouts") or [] if isinstance(r, dict)]
    model_dir = config.get("model_dir") or None
    model = str(meta.get("model") or "")
    if not model_dir and ":" in model:
        model_dir = model.split(":", 1)[1]
    return ViewRun(
        path=path,
        kind="bench",
        rollouts=rollouts,
        config=config,
        meta=meta,
        model_dir=_existing_dir(model_dir, config.get("tokenizer") or "byte"),
    )


def _bench_rollout(r: dict[str, Any]) -> ViewRollout:
    return ViewRollout(
        id=str(r.get("rollout_id", "")),
        task_id=str(r.get("task_id", "")),
        harness=str(r.get("harness", "")),
        group_id=str(r.get("group_id", "")),
        sample_index=int(r.get("sample_index") or 0),
        phase="bench",
        status=str(r.get("status", "")),
        reason=str(r.get("reason") or ""),
        reward=_float(r.get("reward")),
        subscores=dict(r.get("subscores") or {}),
        verifier=r.get("verifier"),
        workspace_diff=list(r.get("workspace_diff") or []),
        end_reason=str(r.get("end_reason") or ""),
        timing=dict(r.get("timing") or {}),
        advantage=_float(r.get("advantage")),
        transcript=_transcript(r),
        records=sorted(r.get("records") or [], key=lambda c: int(c.get("seq") or 0)),
    )


def _float(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _existing_dir(candidate: Any, tokenizer: str) -> Path | None:
    """The model directory to decode with: ``candidate`` if it exists; else (no candidate, or
    one that names the model kit's default tiny model, e.g. a run recorded on another
    machine) the default tiny model of ``tokenizer``; ``None`` when neither is available."""
    if candidate and Path(str(candidate)).is_dir():
        return Path(str(candidate))
    if candidate:
        name = Path(str(candidate)).name
        kinds = [k for k in ("byte", "qwen3") if name.startswith(f"qwen3-tiny-{k}-")]
        if not kinds:
            return None
        tokenizer = kinds[0]
    try:
        from clawrl.proxy import build_default_model

        return Path(build_default_model(tokenizer))  # type: ignore[arg-type]
    except Exception:  # the viewer still works without text: token ids are shown
        return None


def _capture_records(path: Path) -> list[dict[str, Any]]:
    from clawrl.proxy import read_records

    out: list[dict[str, Any]] = []
    for f in sorted((path / "capture").glob("*/*.jsonl")):
        out.extend(dict(r) for r in read_records(f))
    return out


def _train_run(path: Path) -> ViewRun:
    config = _read_json(path / "config.json") or {}
    model = config.get("model") or {}
    by_rollout: dict[str, list[dict[str, Any]]] = {}
    for rec in _capture_records(path):
        md = rec.get("metadata") or {}
        rid = str(md.get("rollout_id") or rec.get("session_id"))
        by_rollout.setdefault(rid, []).append(rec)
    recorded = _recorded_rollouts(sorted((path / "rollouts").glob("*.jsonl")))
    rollouts = [_train_rollout(rid, recs, recorded.get(rid)) for rid, recs in by_rollout.items()]
    rollouts.sort(key=lambda r: (r.step or 0, r.phase, r.group_id, r.sample_index, r.id))
    return ViewRun(
        path=path,
        kind="train",
        rollouts=rollouts,
        metrics=_read_jsonl(path / "metrics.jsonl"),
        config=config,
        meta={"run_id": path.name},
        model_dir=_existing_dir(model.get("path") or None, model.get("tokenizer") or "byte"),
    )


def _recorded_rollouts(files: Iterable[Path]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for f in files:
        for row in _read_jsonl(f):
            if row.get("rollout_id"):
                out[str(row["rollout_id"])] = row
    return out


def _train_rollout(rid: str, recs: list[dict[str, Any]], row: dict[str, Any] | None) -> ViewRollout:
    recs = sorted(recs, key=lambda c: int(c.get("seq") or 0))
    md = recs[0].get("metadata") or {}
    group = str(md.get("group_id") or "")
    step: int | None = None
    phase = "train"
    if m := _STEP_GROUP.match(group):
        step = int(m.group(1)) + 1  # the loop's group prefix counts from 0, its rows from 1
    elif m := _EVAL_GROUP.match(group):
        phase = f"eval-{m.group(1)}"
    elif "/" in group:  # e.g. the cold start's scripted trajectories (coldstart/…)
        phase = group.split("/", 1)[0]
    r = _bench_rollout({**(row or {}), "records": recs}) if row else None
    return ViewRollout(
        id=rid,
        task_id=str(md.get("task_id") or ""),
        harness=str(md.get("harness") or ""),
        group_id=group,
        sample_index=int(md.get("sample_index") or 0),
        step=step,
        phase=phase,
        status=r.status if r else "",
        reason=r.reason if r else "",
        reward=r.reward if r else None,
        subscores=r.subscores if r else {},
        verifier=r.verifier if r else None,
        workspace_diff=r.workspace_diff if r else [],
        end_reason=r.end_reason if r else "",
        timing=r.timing if r else {},
        advantage=r.advantage if r else None,
        tokens=dict((row or {}).get("tokens") or {}),
        transcript=r.transcript if r else [],
        records=recs,
    )


def dumps_compact(obj: Any) -> str:
    """JSON text for embedding in a ``<script>`` (``</`` escaped)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
