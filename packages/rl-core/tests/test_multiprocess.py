"""Multi-process training: ``accelerate launch`` with 2 CPU processes (gloo; DDP, and FSDP2 with
``TrainerConfig.fsdp``) against the same steps in this process.

The launched worker (``multiprocess_worker.py``) trains on random group trees dealt to the two
ranks by token count; rank 0 writes the summed gradients, parameters and metrics. They must
equal the one-process step's to float64 rounding, which holds only if the loss normalisation
is global (a token-mean over all ranks' memberships, not a mean of per-rank means) and the
PPO advantages are whitened over the whole batch. Then a second launch resumes from the
sharded checkpoint and must reproduce step 2.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import torch
from accelerate import Accelerator
from clawrl.rl_core import (
    ConfigError,
    PackingError,
    TreeBatch,
    broadcast_batch,
    partition_by_tokens,
    split_by_token_budget,
)
from clawrl.rl_core.distributed import minibatch_pad_sizes, tree_token_ranges
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import multiprocess_worker as worker  # noqa: E402

#: float64 throughout; sums over ranks reorder additions, nothing else differs
RTOL, ATOL = 1e-9, 1e-12


#: A rank of these 2-process gloo launches died of SIGABRT ("terminate called without an
#: active exception": a C++ std::thread destroyed while joinable) in 2 of about 7 fresh-clone
#: CI runs (2026-12-04, fsdp-resume, once known to be after rank 0 had written its results);
#: never in about 95 launches here (alone, in loops, under CPU load). Its cause inside torch
#: is not found. Such a launch runs once more; any other failure, or a second abort, fails the
#: test. Every attempt's output (faulthandler stacks, each rank's phases) stays in
#: launch-<mode>-<n>.log.
LAUNCH_ATTEMPTS = 2


def _launch(out: Path, mode: str) -> None:
    # a rank that dies of a signal prints every thread's Python stack (faulthandler)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    env["PYTHONFAULTHANDLER"] = "1"
    for attempt in range(1, LAUNCH_ATTEMPTS + 1):
        with socket.socket() as s:  # a free port: other test runs may use accelerate's default
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cmd = [
            *(sys.executable, "-m", "accelerate.commands.launch"),
            *("--multi_gpu", "--num_processes", "2", "--num_machines", "1"),
            *("--mixed_precision", "no", "--dynamo_backend", "no"),
            *("--main_process_port", str(port)),
            *(str(HERE / "multiprocess_worker.py"), str(out), mode),
        ]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        log = out / f"launch-{mode}-{attempt}.log"
        log.write_text(f"{done.stdout}\n----- stderr\n{done.stderr}")
        if done.returncode == 0:
            return
        if attempt == LAUNCH_ATTEMPTS or "SIGABRT" not in done.stderr:
            pytest.fail(f"{mode} launch failed (log {log}):\n{done.stderr[-8000:]}")
        print(f"[{mode}] a rank died of SIGABRT; launching again (log {log})", file=sys.stderr)


def _read(out: Path, mode: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    return load_file(str(out / f"{mode}.safetensors")), orjson.loads(
        (out / f"{mode}.json").read_bytes()
    )


def _assert_close(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], prefix: str) -> int:
    keys = sorted(k for k in want if k.startswith(prefix))
    assert keys and keys == sorted(k for k in got if k.startswith(prefix))
    for k in keys:
        torch.testing.assert_close(got[k], want[k], rtol=RTOL, atol=ATOL, msg=k)
    return len(keys)


def test_partition_by_tokens_is_balanced_and_deterministic() -> None:
    assert partition_by_tokens([5, 9, 1, 4, 4], 2) == [[1, 4], [0, 2, 3]]  # 13 / 10
    assert partition_by_tokens([3, 3], 3) == [[0], [1], []]
    parts = partition_by_tokens(list(range(40)), 4)
    loads = sorted(sum(p) for p in parts)
    assert sorted(i for p in parts for i in p) == list(range(40))
    assert loads[-1] - loads[0] <= 39


def test_partition_errors_and_single_process_broadcast() -> None:
    with pytest.raises(ConfigError):
        partition_by_tokens([1, 2], 0)
    with pytest.raises(ConfigError):
        partition_by_tokens([1, -2], 2)
    trees, rewards = worker.make_batch(1)
    acc = Accelerator(cpu=True)
    assert broadcast_batch(trees, rewards, acc) == (trees, rewards)
    with pytest.raises(ConfigError):
        broadcast_batch(None, None, acc)  # rank 0 must bring the batch


def test_pieces_of_token_ranges_cover_exactly_those_ranges() -> None:
    trees, _ = worker.make_batch(1)
    batch = TreeBatch.from_trees(trees)
    sizes = [int(t.input_ids.shape[0]) for t in trees]
    lo, hi = sizes[0], sizes[0] + sizes[1] + sizes[2]
    pieces = split_by_token_budget(batch, 24, token_ranges=[(0, sizes[0]), (lo, hi)])
    owned = sorted(i for p in pieces for i in range(p.start, p.stop))
    assert owned == [*range(0, sizes[0]), *range(lo, hi)]
    assert all(p.num_tokens <= 24 for p in pieces)
    with pytest.raises(PackingError):
        split_by_token_budget(batch, 24, token_ranges=[(lo, hi), (0, 4)])


@pytest.mark.slow
def test_two_processes_equal_one_and_resume_from_sharded_checkpoint(tmp_path: Path) -> None:
    single, multi = tmp_path / "single", tmp_path / "multi"
    single.mkdir()
    multi.mkdir()
    worker.main(single, "steps")  # the oracle: one process, whole batch
    _launch(multi, "steps")
    s_t, s_i = _read(single, "steps")
    m_t, m_i = _read(multi, "steps")
    assert (s_i["world_size"], m_i["world_size"]) == (1, 2)
    # the trees really are split unevenly (the per-rank-mean bug would show)
    sizes = [int(t.input_ids.shape[0]) for t in worker.make_batch(1)[0]]
    loads = [sum(sizes[i] for i in p) for p in partition_by_tokens(sizes, 2)]
    assert loads[0] != loads[1], loads
    # step 1: summed gradients, then the parameters after AdamW; PPO's gradients
    assert _assert_close(m_t, s_t, "grad.") > 10
    _assert_close(m_t, s_t, "ppo.grad.")
    _assert_close(m_t, s_t, "after1.")
    _assert_close(m_t, s_t, "after2.")
    for step in ("step1", "step2", "ppo"):
        for key in ("loss", "policy_loss", "entropy", "value_loss", "advantage_mean", "lr"):
            if key in s_i[step]:
                assert m_i[step][key] == pytest.approx(s_i[step][key], rel=RTOL, abs=ATOL), key
    # the sharded checkpoint: every rank wrote a shard and its RNG
    ckpt = multi / "ckpt"
    assert sorted(p.name for p in (ckpt / "dcp").glob("*.distcp")) == [
        "__0_0.distcp",
        "__1_0.distcp",
    ]
    assert (ckpt / "rng-0.safetensors").is_file() and (ckpt / "rng-1.safetensors").is_file()
    # export_hf: full weights written by rank 0, equal to the trained policy after step 1
    hf = AutoModelForCausalLM.from_pretrained(multi / "hf", dtype=torch.float64)
    for name, p in hf.named_parameters():
        torch.testing.assert_close(p, m_t[f"after1.policy.{name}"], rtol=0, atol=0)
    # resume: a fresh launch, other initial weights, loads the sharded checkpoint -> same step 2
    _launch(multi, "resume")
    r_t, r_i = _read(multi, "resume")
    assert r_i["data_position"] == 1
    assert r_i["step2"]["loss"] == pytest.approx(m_i["step2"]["loss"], rel=RTOL, abs=ATOL)
    assert r_i["step2"]["lr"] == m_i["step2"]["lr"] == pytest.approx(0.75e-2)  # linear, 4 steps
    _assert_close(r_t, m_t, "after2.")


def _rank_pieces(seed: int) -> list[list[int]]:
    """Targets per token-budget piece of each of 2 ranks' trees (worker.make_batch(seed))."""
    trees, _ = worker.make_batch(seed)
    batch = TreeBatch.from_trees(trees)
    sizes = [int(t.input_ids.shape[0]) for t in trees]
    return [
        [int(p.targets.size) for p in split_by_token_budget(batch, 24, token_ranges=ranges)]
        for ranges in (tree_token_ranges(sizes, part) for part in partition_by_tokens(sizes, 2))
    ]


def test_minibatch_pad_sizes() -> None:
    assert minibatch_pad_sizes([3, 4], 2) == [2, 2]  # rank 0's second minibatch: 1 + 1 padding
    assert minibatch_pad_sizes([5, 2, 0], 2) == [3, 2]
    assert minibatch_pad_sizes([0, 0], 1) == [0]


@pytest.mark.slow
def test_fsdp_two_processes_equal_one_resume_and_export(tmp_path: Path) -> None:
    """TrainerConfig.fsdp under a 2-process launch: the FSDP2-sharded policy, KL reference,
    value head and critic give the one-process step; a sharded checkpoint resumes in a fresh
    2-process launch and in one process; export_hf gathers the full weights."""
    single, multi = tmp_path / "single", tmp_path / "multi"
    single.mkdir()
    multi.mkdir()
    # ranks own unequal numbers of pieces (3 / 4 at step 1, 4 / 2 at step 2, where one of
    # rank 0's has no target): every rank's forwards and backwards are padded to equal counts
    pieces1, pieces2 = _rank_pieces(1), _rank_pieces(2)
    assert [len(p) for p in pieces1] == [3, 4] and [len(p) for p in pieces2] == [4, 2]
    assert 0 in pieces2[0]
    worker.main(single, "fsdp-steps")  # the oracle: one process (fsdp has no effect there)
    _launch(multi, "fsdp-steps")
    s_t, s_i = _read(single, "fsdp-steps")
    m_t, m_i = _read(multi, "fsdp-steps")
    assert (s_i["world_size"], s_i["fsdp"], m_i["world_size"], m_i["fsdp"]) == (1, False, 2, True)
    assert s_i["step1"]["grad_norm"] > 0.5  # max_grad_norm 0.5: clipped, by the global norm
    # GRPO (entropy, k3 KL to the sharded reference, TIS, clipping): gradients after the
    # reduce-scatter, parameters after two AdamW steps
    assert _assert_close(m_t, s_t, "grad.") > 10
    _assert_close(m_t, s_t, "after1.")
    _assert_close(m_t, s_t, "after2.")
    _assert_close(m_t, s_t, "ppo_grad.")  # PPO, value head (its own FSDP group)
    # PPO with a sharded critic: value warm-up (policy without autograd), then both
    _assert_close(m_t, s_t, "critic_after1.")
    _assert_close(m_t, s_t, "critic_grad2.")
    _assert_close(m_t, s_t, "critic_after2.")
    for step in ("step1", "step2", "ppo", "critic1", "critic2"):
        for key, want in s_i[step].items():
            assert m_i[step][key] == pytest.approx(want, rel=RTOL, abs=ATOL), (step, key)
    # FSDP against DDP in the same launch: 2 minibatches x 2 epochs (minibatch k padded to
    # the ranks' largest k-th), then an SFT step
    fsdp_mb = {k.removeprefix("mb_fsdp."): v for k, v in m_t.items() if k.startswith("mb_fsdp.")}
    ddp_mb = {k.removeprefix("mb_ddp."): v for k, v in m_t.items() if k.startswith("mb_ddp.")}
    assert _assert_close(fsdp_mb, ddp_mb, "policy_model.") > 10
    for step in ("mb", "mb_sft"):
        fsdp_s, ddp_s = m_i[step.replace("mb", "mb_fsdp")], m_i[step.replace("mb", "mb_ddp")]
        for key, want in ddp_s.items():
            assert fsdp_s[key] == pytest.approx(want, rel=RTOL, abs=ATOL), (step, key)
    # the sharded checkpoint: a shard and an RNG file per rank
    ckpt = multi / "ckpt-fsdp"
    assert sorted(p.name for p in (ckpt / "dcp").glob("*.distcp")) == [
        "__0_0.distcp",
        "__1_0.distcp",
    ]
    assert (ckpt / "rng-1.safetensors").is_file()
    # export_hf: the full weights from the shards, written by rank 0
    hf = AutoModelForCausalLM.from_pretrained(multi / "hf-fsdp", dtype=torch.float64)
    exported = {f"after1.policy_model.policy.{n}": p.detach() for n, p in hf.named_parameters()}
    assert _assert_close(exported, s_t, "after1.policy_model.policy.") > 10
    for name, p in exported.items():
        torch.testing.assert_close(p, m_t[name], rtol=0, atol=0)
    # resume: a fresh 2-process launch with other initial weights, then one process, load the
    # sharded checkpoint and repeat step 2
    _launch(multi, "fsdp-resume")
    r_t, r_i = _read(multi, "fsdp-resume")
    worker.main(multi, "fsdp-resume")
    o_t, o_i = _read(multi, "fsdp-resume")
    assert (r_i["world_size"], r_i["fsdp"], o_i["world_size"]) == (2, True, 1)
    for got_t, got_i in ((r_t, r_i), (o_t, o_i)):
        assert got_i["data_position"] == 1
        for key, want in m_i["step2"].items():
            assert got_i["step2"][key] == pytest.approx(want, rel=RTOL, abs=ATOL), key
        _assert_close(got_t, m_t, "after2.")
