"""End to end: a shortened quickstart through ``train`` (podman sandboxes, the reference
harness, the proxy with the embedded backend, the tiny byte model), then ``--resume``; and
kill -9 mid-step, then ``--resume``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.podman,
]

SHORT = """
[run]
out = "{out}"
steps = {steps}
checkpoint_every = 1
[tasks]
train_n = 6
heldout_n = 2
tasks_per_step = 2
[rollout]
samples = 2
max_tokens = 24
concurrency = 4
verifier = "{verifier}"
[cold_start]
enabled = true
tasks = 2
steps = 2
batch_size = 2
[eval]
enabled = false
[logging]
progress = false
"""


def _train(config: Path, *extra: str, timeout: float = 280) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "clawrl.rl_core.train_cli", "--config", str(config), *extra],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def _rows(out: Path, kind: str) -> list[dict[str, Any]]:
    from clawrl.rl_core.train import read_jsonl

    return [r for r in read_jsonl(out / "metrics.jsonl") if r.get("kind") == kind]


def _run_ids(out: Path) -> list[str]:
    return [json.loads(line)["run_id"] for line in (out / "runs.jsonl").read_text().splitlines()]


def _records(out: Path, run_id: str) -> list[dict[str, Any]]:
    from clawrl.proxy import read_records

    recs: list[dict[str, Any]] = []
    for f in sorted((out / "capture" / run_id).glob("*.jsonl")):
        recs += read_records(f)
    return recs


def _assert_same_weights(ref: Path, checkpoint: Path) -> None:
    """Every tensor of ``ref`` equals the checkpoint's tensor of the same name (the
    checkpoint's names may carry a wrapper's prefix)."""
    import torch
    from safetensors.torch import load_file

    a, b = load_file(str(ref)), load_file(str(checkpoint))
    for name, t in a.items():
        match = [k for k in b if k == name or k.endswith("." + name)]
        assert len(match) == 1, (name, sorted(b)[:5])
        assert torch.equal(t, b[match[0]]), name


def test_train_loop_syncs_weights_logs_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cfg = tmp_path / "short.toml"
    # the quickstart's host verifier: the cold start needs its scripted rollouts to pass
    cfg.write_text(
        SHORT.format(out=out, steps=2, verifier="host")
        .replace("[eval]\nenabled = false", "[eval]\nenabled = true\nsamples = 1")
        .replace("checkpoint_every = 1", "checkpoint_every = 1\nkeep_checkpoints = 3")
        + "[algo]\nkl_coef = 0.05\n"
    )  # a KL term to the policy as RL started
    res = _train(cfg)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    # held-out evals after the cold start and at the end, with the verifier's sub-scores
    evals = _rows(out, "eval")
    assert [r["tag"] for r in evals] == ["coldstart-2", "step-2"]
    for r in evals:
        assert r["eval_n"] == 2 and 0.0 <= r["eval_reward"] <= 1.0
        subs = [
            r[f"eval_subscore/{k}"]
            for k in ("file_created", "name_similarity", "content_similarity")
        ]
        assert all(0.0 <= v <= 1.0 for v in subs)
        assert abs(sum(subs) / 3 - r["eval_reward"]) < 1e-9  # the graded reward is their mean
    train = _rows(out, "train")
    assert [r["step"] for r in train] == [1, 2]
    # each process records the precisions it resolved (the defaults here)
    (line,) = (json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines())
    assert (line["backend_dtype"], line["precision"]) == ("fp32", "fp32")
    # cold start synced version 1; every RL step adds one
    assert [r["policy_version"] for r in train] == [2, 3]
    assert all(r["n_rollouts"] == 4 and r["tree_tokens"] > 0 for r in train)
    assert train[0]["mean_abs_logprob_diff"] < 1e-3  # trainer and backend agree
    for r in train:  # the rollout phase's split, and the embedded backend's prompt KV reuse
        assert (
            0.0 < r["time/verify"] <= r["time/verify_total"]
            and r["time/verify"] < r["time/rollout"]
        )
        assert r["serve/prompt_tokens"] >= r["serve/prefill_tokens"] > 0
        assert r["serve/prefix_hit_tokens"] > 0  # 2 samples of a task share their prompt
        assert r["serve/prefill_tokens_saved"] > 0
    assert all(r["serve/prompt_tokens"] > 0 for r in evals)
    sft = _rows(out, "sft")
    assert [r["sft_step"] for r in sft] == [1, 2]
    # the proxy's records show the synced versions: step 2's rollouts ran at version 2
    run_id = _run_ids(out)[0]
    versions = {r["policy_version"] for r in _records(out, run_id)}
    assert {1, 2} <= versions
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((out / "config.json").read_text())["run"]["steps"] == 2
    assert (out / "checkpoints" / "latest").read_text() == "step-000002"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["policy_version"] == 3

    ref = out / "checkpoints" / "ref_policy.safetensors"
    ref_bytes = ref.read_bytes()
    # a fresh run with a KL term checkpoints RL's start (step 0, after the cold start), and
    # its KL reference is exactly that policy
    ckpts = sorted(p.name for p in (out / "checkpoints").glob("step-*"))
    assert ckpts == ["step-000000", "step-000001", "step-000002"]
    _assert_same_weights(ref, out / "checkpoints" / "step-000000" / "model.safetensors")

    # --resume with more steps continues from the checkpoint (no cold start again)
    res = _train(cfg, "--resume", "--steps", "3")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "resumed from step-000002" in res.stdout
    train = _rows(out, "train")
    assert [r["step"] for r in train] == [1, 2, 3]
    assert train[-1]["policy_version"] == 4
    assert len(_rows(out, "sft")) == 2
    resumed = _run_ids(out)[1]
    # step 3's rollouts ran at version 3, the held-out eval after it at version 4
    assert {r["policy_version"] for r in _records(out, resumed)} == {3, 4}
    # the KL reference after --resume is still the policy as RL started, not the freshly
    # built (pre-cold-start) model: the KL stays of the first run's size (≈ 0 here, the
    # policy barely moves in 2 steps at lr 1e-5); to the pre-cold-start model it is ≈ 0.05
    assert ref.read_bytes() == ref_bytes
    assert train[-1]["kl"] < train[1]["kl"] + 0.01, [r["kl"] for r in train]


def test_kill_mid_step_then_resume(tmp_path: Path) -> None:
    import asyncio

    from clawrl.sandbox import list_containers

    out = tmp_path / "run"
    cfg = tmp_path / "short.toml"
    cfg.write_text(
        SHORT.format(out=out, steps=3, verifier="sandbox").replace(
            "enabled = true", "enabled = false"
        )
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "clawrl.rl_core.train_cli", "--config", str(cfg)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    try:
        # wait for step 1's checkpoint, then for step 2's sandboxes, then kill -9
        deadline = time.time() + 240
        while time.time() < deadline and not (out / "checkpoints" / "latest").exists():
            assert proc.poll() is None, "train exited early"
            time.sleep(0.5)
        run_id = _run_ids(out)[0]
        while time.time() < deadline:
            boxes = asyncio.run(list_containers(run_id=run_id))
            if boxes:
                break
            time.sleep(0.3)
        assert boxes, "no sandbox of step 2 seen"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert (out / "checkpoints" / "latest").read_text() == "step-000001"

    # what kill -9 left on the host: the proxy's socket directory, the rollouts' workspaces
    def left() -> list[Path]:
        return sorted(Path(tempfile.gettempdir()).glob(f"clawrl-*-{proc.pid}.*"))

    assert any(p.name.startswith("clawrl-train-px-") for p in left())
    res = _train(cfg, "--resume")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "resumed from step-000001" in res.stdout
    assert left() == [] and "temporary director" in res.stdout  # reaped when resuming
    train = _rows(out, "train")
    assert [r["step"] for r in train] == [1, 2, 3]  # step 2 ran again, once in the log
    assert train[-1]["policy_version"] == 3
    # no sandbox of the killed run is left, and its capture reads cleanly
    assert asyncio.run(list_containers(run_id=run_id)) == []
    assert all(r["policy_version"] in (0, 1) for r in _records(out, run_id))
