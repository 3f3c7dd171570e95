"""Mix-harness training through two real harness programs: one
``train`` step whose batch runs pi (Chat Completions, streamed) and Codex CLI (Responses,
streamed) in podman sandboxes against the embedded tiny model (qwen3 tokenizer: the
harnesses' prompts are 1.3k-9k tokens), GRPO advantages per (task, harness) group, one
tree-packed update and a weight sync.

The recorded ≥ 5-step run over four harnesses (pi, Codex, Claude Code, OpenClaw) is
``tools/harnesses/results/train_4harness_5step_*``; see tools/harnesses/README.md.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.podman,
    pytest.mark.skipif(shutil.which("npm") is None, reason="needs npm to install harnesses"),
]

CONFIG = """
[run]
out = "{out}"
steps = 1
checkpoint_every = 1
[model]
tokenizer = "qwen3"
[tasks]
train_n = 4
heldout_n = 1
tasks_per_step = 1
[rollout]
harnesses = ["pi", "codex"]
samples = 2
max_turns = 2
max_tokens = 24
concurrency = 4
agent_timeout_s = 600
[algo]
token_budget = 32768
[eval]
enabled = false
[logging]
progress = false
"""


def _train(cfg: Path) -> None:
    """``train --config cfg`` as a user runs it; it must succeed."""
    res = subprocess.run(
        [sys.executable, "-m", "clawrl.rl_core.train_cli", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=840,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]


def test_one_mix_harness_step_through_pi_and_codex(tmp_path: Path) -> None:
    from clawrl.proxy import read_records
    from clawrl.rl_core.train import read_jsonl

    out = tmp_path / "run"
    cfg = tmp_path / "mix.toml"
    cfg.write_text(CONFIG.format(out=out))
    _train(cfg)
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if r.get("kind") == "train"]
    assert len(rows) == 1
    row = rows[0]
    assert row["step"] == 1 and row["policy_version"] == 1  # synced once
    assert row["n_rollouts"] == 4 and row["status/infra-error"] == 0
    # per-harness metrics, one GRPO group per (task, harness)
    for h in ("pi", "codex"):
        assert f"reward_mean/{h}" in row and f"pass_rate/{h}" in row
    assert row["trajectories"] >= 4 and row["tree_tokens"] > 0
    assert row["flat_tokens"] >= row["tree_tokens"]
    assert row["mean_abs_logprob_diff"] < 1e-3  # trainer and backend agree
    # every rollout's session was captured, by both harnesses' APIs
    run_id = json.loads((out / "runs.jsonl").read_text().splitlines()[0])["run_id"]
    sessions = {r["session_id"] for r in read_jsonl(out / "rollouts" / "step-0001.jsonl")}
    captured = sorted((out / "capture" / run_id).glob("*.jsonl"))
    files = [f for f in captured if {rec["session_id"] for rec in read_records(f)} <= sessions]
    assert len(files) == 4 and len(sessions) == 4
    assert len(captured) - len(files) <= 1  # at most the runner's decode-speed probe
    apis = {rec["api"] for f in files for rec in read_records(f)}
    assert apis == {"openai.chat", "openai.responses"}
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_calls_longer_than_the_token_budget_end_context_overflow_not_the_run(
    tmp_path: Path,
) -> None:
    """``algo.token_budget`` below a harness's prompt (Codex's is 6-9k tokens here, pi's
    1.3k): the proxy serves at most the budget per call, so Codex's calls get the typed
    context-length error and its rollouts end ``context-overflow`` (counted, never trained
    on), while pi's are trained on. Without the cap the step's update met a path longer than
    one forward may hold and the run died (TokenBudgetError)."""
    from clawrl.rl_core.train import read_jsonl

    out = tmp_path / "run"
    cfg = tmp_path / "mix.toml"
    cfg.write_text(CONFIG.format(out=out).replace("token_budget = 32768", "token_budget = 4096"))
    _train(cfg)
    (row,) = [r for r in read_jsonl(out / "metrics.jsonl") if r.get("kind") == "train"]
    assert row["status/context-overflow"] == 2
    assert row["context_overflow_rate/codex"] == 1.0
    assert row["context_overflow_rate/pi"] == 0.0
    assert row["trajectories"] >= 2 and "tree_tokens/codex" not in row
    rollouts = list(read_jsonl(out / "rollouts" / "step-0001.jsonl"))
    assert {r["harness"] for r in rollouts if r["status"] == "context-overflow"} == {"codex"}
