"""Writing the viewer: ``<run>/view/index.html`` and one data file per rollout and group.

The page works from ``file://`` with no server and no network: the index holds the run's
summary (rollout list, curves as inline SVG) and its script; each rollout's (and each
group's) data is a ``data/<key>.js`` file that registers itself with
``window.__clawrl_load(key, data)`` when the page inserts a ``<script>`` tag for it, on
demand — so a big run loads one rollout at a time (browsers refuse ``fetch`` of ``file://``
JSON; a script tag is allowed).
"""

from __future__ import annotations

import html
import shutil
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from clawrl.bench.view.calls import call_views
from clawrl.bench.view.curves import curves_svg
from clawrl.bench.view.sources import ViewRollout, ViewRun, dumps_compact, load_run
from clawrl.bench.view.tokens import TokenText
from clawrl.bench.view.tree import ViewTree, build_tree, heat_paths, tree_html

__all__ = ["build_view", "group_data", "rollout_data"]

_ADV_NOTE = "advantages: this run recorded none (a bench run is not trained) — logprob only"
_IW_NOTE = (
    "importance weights: none recorded for this rollout (a bench run is not trained; a train "
    "run records them for its trained rollouts) — the rollout logprob is shown"
)


def _max_leaves(run: ViewRun) -> int | None:
    v = (run.config.get("rollout") or {}).get("max_leaves") if run.kind == "train" else None
    return int(v) if isinstance(v, int) and v > 0 else None


def _heat(ro: ViewRollout, vt: ViewTree) -> dict[str, Any]:
    paths = heat_paths(vt, ro.tokens)
    per_token = any("adv" in p for p in paths)
    return {
        "paths": paths,
        "advantage": ro.advantage,
        "adv_note": "" if ro.advantage is not None or per_token else _ADV_NOTE,
        "iw_note": "" if per_token else _IW_NOTE,
        "per_token": per_token,
    }


def _summary(ro: ViewRollout) -> dict[str, Any]:
    return {
        "id": ro.id,
        "task_id": ro.task_id,
        "harness": ro.harness,
        "group_id": ro.group_id,
        "sample_index": ro.sample_index,
        "step": ro.step,
        "phase": ro.phase,
        "status": ro.status,
        "reason": ro.reason,
        "reward": ro.reward,
        "advantage": ro.advantage,
        "n_calls": len(ro.records),
        "n_diverged": sum(
            1 for r in ro.records if (r.get("prompt_relation") or {}).get("kind") == "diverged"
        ),
        "flags": sorted({f for r in ro.records for f in r.get("flags") or []}),
    }


def rollout_data(ro: ViewRollout, text: TokenText, max_leaves: int | None = None) -> dict[str, Any]:
    """Everything a rollout's page shows (the payload of its data file)."""
    vt = build_tree({ro.id: ro.records}, max_leaves)
    heat = _heat(ro, vt)
    ids: list[int] = [t for p in heat["paths"] for t in p["ids"]]
    calls = call_views(ro.records, text)
    for c in calls:
        d = c["relation"].get("diff")
        if d:
            ids += d["left"] + d["right"]
    return {
        **_summary(ro),
        "end_reason": ro.end_reason,
        "timing": ro.timing,
        "subscores": ro.subscores,
        "verifier": ro.verifier,
        "workspace_diff": ro.workspace_diff,
        "transcript": ro.transcript,
        "calls": calls,
        "tree_html": tree_html(vt, text),
        "tree_stats": vt.tree.stats().to_dict() if vt.tree is not None else None,
        "n_leaves": vt.n_leaves,
        "dead": sorted(vt.dead),
        "side": sorted(vt.side),
        "over_branched": sorted(vt.over_branched),
        "heat": heat,
        "vocab": text.table(ids),
        "decoded": text.available,
    }


def group_data(
    group_id: str, rollouts: list[ViewRollout], text: TokenText, max_leaves: int | None
) -> dict[str, Any]:
    """A group's merged prefix tree (the payload of its data file)."""
    vt = build_tree({r.id: r.records for r in rollouts}, max_leaves)
    return {
        "group_id": group_id,
        "rollouts": [r.id for r in rollouts],
        "tree_html": tree_html(vt, text),
        "tree_stats": vt.tree.stats().to_dict() if vt.tree is not None else None,
        "n_leaves": vt.n_leaves,
        "over_branched": sorted(vt.over_branched),
    }


def _write_data(path: Path, key: str, data: dict[str, Any]) -> None:
    path.write_text(
        f"window.__clawrl_load({dumps_compact(key)},{dumps_compact(data)});\n", encoding="utf-8"
    )


def _asset(name: str) -> str:
    return (resources.files("clawrl.bench") / "templates" / "view" / name).read_text("utf-8")


def _index(run: ViewRun, entries: list[dict[str, Any]], groups: list[dict[str, Any]]) -> str:
    steps = sorted(
        {e["step"] for e in entries if e["step"] is not None}
        | {int(r["step"]) for r in run.metrics if r.get("kind") == "train" and "step" in r}
    )
    index = {
        "kind": run.kind,
        "run": str(run.meta.get("run_id") or run.path.name),
        "path": str(run.path),
        "model": str(run.meta.get("model") or (run.config.get("model") or "")),
        "rollouts": entries,
        "groups": groups,
        "steps": steps,
        "metrics": [r for r in run.metrics if r.get("kind") == "train"],
        "generated": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    page = _asset("index.html")
    page = page.replace("/*CSS*/", _asset("view.css"))
    page = page.replace("/*JS*/", _asset("view.js"))
    page = page.replace("/*INDEX*/null", dumps_compact(index))
    page = page.replace("<!--CURVES-->", curves_svg(run.metrics))
    return page.replace("<!--TITLE-->", html.escape(f"clawrl · {index['run']}"))


def build_view(
    run_dir: str | Path,
    out_dir: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Write the viewer of a bench or train run folder; returns the path of its
    ``index.html`` (in ``out_dir``, default ``<run_dir>/view``).

    Raises:
        FileNotFoundError: ``run_dir`` is not a run folder (see :func:`load_run`).
    """
    run = load_run(run_dir)
    out = Path(out_dir) if out_dir is not None else run.path / "view"
    if (out / "data").is_dir():
        shutil.rmtree(out / "data")
    (out / "data").mkdir(parents=True, exist_ok=True)
    text = TokenText(run.model_dir)
    leaves = _max_leaves(run)
    entries = []
    for i, ro in enumerate(run.rollouts):
        key = f"r{i}"
        data = rollout_data(ro, text, leaves)
        _write_data(out / "data" / f"{key}.js", key, data)
        entries.append({**_summary(ro), "key": key, "n_leaves": data["n_leaves"]})
        if progress is not None:
            progress(f"rollout {i + 1}/{len(run.rollouts)}")
    by_group: dict[str, list[ViewRollout]] = {}
    for ro in run.rollouts:
        by_group.setdefault(ro.group_id, []).append(ro)
    groups = []
    for j, (gid, ros) in enumerate(sorted(by_group.items())):
        if len(ros) < 2:
            continue
        key = f"g{j}"
        data = group_data(gid, ros, text, leaves)
        _write_data(out / "data" / f"{key}.js", key, data)
        groups.append({"key": key, "group_id": gid, "n": len(ros), "n_leaves": data["n_leaves"]})
    index = out / "index.html"
    index.write_text(_index(run, entries, groups), encoding="utf-8")
    return index
