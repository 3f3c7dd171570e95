"""End to end through ``train`` (podman sandboxes, the reference harness, the proxy with the
embedded tiny model): the held-out evaluation runs at the training temperature and again
greedily, also through a harness never trained through (transfer), and the shuffled-reward
control trains on permuted rewards while logging the true ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.podman]

CONFIG = """
[run]
out = "{out}"
steps = 1
checkpoint_every = 1
[tasks]
train_n = 6
heldout_n = 2
tasks_per_step = 2
[rollout]
samples = 2
max_tokens = 16
concurrency = 4
verifier = "host"
temperature = 1.0
[algo]
shuffle_rewards = true
[eval]
enabled = true
samples = 2
greedy = true
harnesses = ["reference", "oracle"]   # oracle: a harness never trained through
[logging]
progress = false
plot = false
"""


def test_greedy_eval_and_shuffled_control(tmp_path: Path) -> None:
    from clawrl.proxy import read_records
    from clawrl.rl_core.train import read_jsonl

    out = tmp_path / "run"
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG.format(out=out))
    res = subprocess.run(
        [sys.executable, "-m", "clawrl.rl_core.train_cli", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=400,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    rows = read_jsonl(out / "metrics.jsonl")
    evals = [r for r in rows if r.get("kind") == "eval"]
    assert [r["tag"] for r in evals] == ["step-0", "step-1"]
    for r in evals:
        assert r["eval_n"] == 8 and r["eval_greedy_n"] == 8
        assert r["eval_n/reference"] == 4 and r["eval_n/oracle"] == 4
        assert r["eval_pass_rate/oracle"] == 1.0 and r["eval_greedy_pass_rate/oracle"] == 1.0
        assert 0.0 <= r["eval_greedy_pass_rate"] <= 1.0
        assert "eval_greedy_pass_rate_se/reference" in r and "eval_pass_rate_se" in r
    (train,) = [r for r in rows if r.get("kind") == "train"]
    assert train["rewards_shuffled"] is True
    assert train["n_rollouts"] == 4  # the reference harness only: oracle is eval-only
    assert "pass_rate/oracle" not in train

    # the proxy's records: greedy-eval sessions ran at T = 0, every other session at T = 1;
    # a greedy session's two samples of one task are the same tokens
    records = [rec for f in sorted((out / "capture").rglob("*.jsonl")) for rec in read_records(f)]
    by_kind: dict[bool, set[float]] = {True: set(), False: set()}
    greedy_outputs: dict[tuple[str, int, int], list[tuple[int, ...]]] = {}
    for rec in records:
        if rec["metadata"].get("task_id") == "speed-probe":  # each runner's decode-speed probe
            continue
        greedy = "-greedy/" in str(rec["metadata"].get("group_id", ""))
        by_kind[greedy].add(float(rec["sampling"]["temperature"]))
        if greedy:
            key = (rec["metadata"]["task_id"], int(rec["policy_version"] or 0), rec["seq"])
            greedy_outputs.setdefault(key, []).append(tuple(rec["completion_ids"]))
    assert by_kind == {True: {0.0}, False: {1.0}}, by_kind
    assert greedy_outputs and all(len(set(v)) == 1 for v in greedy_outputs.values())

    # every held-out rollout of both passes is on file, with its task, harness and reward
    for tag in ("step-0", "step-0-greedy", "step-1", "step-1-greedy"):
        lines = (out / "rollouts" / f"eval-{tag}.jsonl").read_text().splitlines()
        assert len(lines) == 8 and all(json.loads(x)["eval"] == tag for x in lines)
    summary = json.loads((out / "summary.json").read_text())
    assert "eval_greedy_gain" in summary
