"""``train`` under ``accelerate launch --num_processes 2`` (CPU, gloo): rank 0 runs the loop
(rollouts in podman sandboxes through the proxy and the embedded backend), both ranks train
(clawrl.rl_core.train.ranks); the same run in one process is the oracle.

The quickstart shortened: a 2-step cold start (SFT on two scripted trajectories), then RL
steps of 2 tasks x 2 rollouts, 2 updates each, checkpoint every step. Every reward of the
untrained tiny model is 0, so GRPO's policy term is 0: ``algo.entropy_coef`` (an entropy
bonus) and ``algo.kl_coef`` (a KL term to the reference model, which ranks > 0 receive from
rank 0) make the updates move the weights. Rollouts are seeded per session
(``rollout_sampling_seed``), so both runs sample the same completions as long as the weights
agree; the test checks that they did, then compares every update's figures.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.podman]

ROOT = Path(__file__).resolve().parents[1]
SETS = (
    "run.steps=2",
    "run.checkpoint_every=1",
    "eval.enabled=false",
    "tasks.tasks_per_step=2",
    "tasks.train_n=6",
    "tasks.heldout_n=2",
    "rollout.samples=2",
    "rollout.max_tokens=24",
    'rollout.verifier="host"',  # the cold start's scripted rollouts pass with it
    "logging.plot=false",
    "algo.entropy_coef=0.01",
    "algo.kl_coef=0.05",
    "cold_start.tasks=2",
    "cold_start.steps=2",
    "cold_start.batch_size=2",
)
#: float32; two ranks sum the gradients in another order than one process
RTOL = 1e-5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _train(out: Path, procs: int, *extra: str) -> subprocess.CompletedProcess[str]:
    """``train`` on the quickstart with :data:`SETS`, in one process or under ``accelerate
    launch``; fails if any process of the launch is left once it has exited."""
    args = ["-m", "clawrl.rl_core.train_cli", "--config", str(ROOT / "examples/quickstart.toml")]
    args += ["--no-progress", "--out", str(out), *(f"--set={s}" for s in SETS), *extra]
    launch = [
        *("-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(procs)),
        *("--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"),
        *("--main_process_port", str(_free_port())),
    ]
    cmd = [sys.executable, *(launch if procs > 1 else []), *args]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=240)
    finally:
        left = True
        try:
            os.killpg(proc.pid, 0)  # anything of the launch still alive?
        except ProcessLookupError:
            left = False
        if left:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert not left, "processes of the launch were left running"
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def _rows(out: Path, kind: str) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["kind"] == kind]


def _samples(out: Path) -> dict[tuple[str, int], tuple[float, list[list[int]]]]:
    """(step/group, sample) → (reward, each call's completion ids) of every trained rollout."""
    got = {}
    for f in sorted((out / "rollouts").glob("step-*.jsonl")):
        for line in f.read_text().splitlines():
            ro = json.loads(line)
            recs = [
                json.loads(x)
                for cap in (out / "capture").glob(f"*/{ro['session_id']}.jsonl")
                for x in cap.read_text().splitlines()
            ]
            calls = [r["completion_ids"] for r in sorted(recs, key=lambda r: r["seq"])]
            got[(ro["group_id"], ro["sample_index"])] = (ro["reward"], calls)
    return got


def _no_containers(out: Path) -> None:
    from clawrl.sandbox import list_containers

    for line in (out / "runs.jsonl").read_text().splitlines():
        run_id = json.loads(line)["run_id"]
        assert asyncio.run(list_containers(run_id=run_id)) == [], run_id


def test_train_loop_two_processes_equal_one_and_resume(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    res = _train(one, 1, "--steps", "3")  # the oracle: one process, three steps in one go
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    res = _train(two, 2)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "train rank 1: stopped by rank 0" in res.stderr
    train = _rows(two, "train")
    assert [r["step"] for r in train] == [1, 2]
    # both ranks trained: the batch became one tree per rank (one process: one tree)
    assert [r["trees"] for r in train] == [2, 2]
    assert all(r["trees"] == 1 for r in _rows(one, "train"))
    # sharded checkpoints, every rank's shard and RNG; the KL reference beside them
    ckpt = two / "checkpoints"
    assert (ckpt / "latest").read_text() == "step-000002"
    shards = sorted(p.name for p in (ckpt / "step-000002" / "dcp").glob("*.distcp"))
    assert shards == ["__0_0.distcp", "__1_0.distcp"]
    assert (ckpt / "step-000002" / "rng-1.safetensors").is_file()
    assert (ckpt / "ref_policy.safetensors").is_file()

    # resume under the 2-process launch: loop state on rank 0, trainer state on both
    res = _train(two, 2, "--resume", "--steps", "3")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "resumed from step-000002" in res.stdout
    train = _rows(two, "train")
    assert [r["step"] for r in train] == [1, 2, 3]
    assert [r["policy_version"] for r in train] == [2, 3, 4]  # the cold start synced 1

    # the same rollouts were sampled (same rewards and completions), so the same batches
    s_one, s_two = _samples(one), _samples(two)
    assert len(s_one) == 12 and s_one == s_two
    # and each update agrees: the cold start's SFT steps, then every RL step's two updates
    # (step 3 after the resume against step 3 of the uninterrupted run)
    for kind, keys in (
        ("sft", ("loss", "grad_norm")),  # num_tokens: one tree vs one per rank
        ("train", ("loss", "loss_last", "grad_norm", "entropy", "kl", "num_memberships")),
    ):
        a, b = _rows(one, kind), _rows(two, kind)
        assert len(a) == len(b) and a
        for ra, rb in zip(a, b, strict=True):
            for k in keys:
                assert rb[k] == pytest.approx(ra[k], rel=RTOL, abs=1e-8), (kind, ra.get("step"), k)
    assert _rows(one, "train")[1]["kl"] > 0  # the reference model took part
    _no_containers(one)
    _no_containers(two)


def test_rank0_error_stops_the_other_rank(tmp_path: Path) -> None:
    """Rank 0 fails (no task suite at the path) before any trainer exists: its ``finally``
    sends stop, rank 1 closes and exits, the launch ends non-zero with nothing left."""
    out = tmp_path / "run"
    res = _train(out, 2, "--set", "tasks.family='path'", "--set", f"tasks.path='{tmp_path}/none'")
    assert res.returncode != 0
    assert "train rank 1: stopped by rank 0" in res.stderr, res.stderr[-3000:]
