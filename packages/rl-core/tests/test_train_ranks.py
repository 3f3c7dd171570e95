"""The train loop's rank protocol (clawrl.rl_core.train.ranks) without a process group: a
fake channel records what rank 0 sends and feeds a follower its commands. The real
2-process runs: tests/test_train_multiprocess.py."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from clawrl.rl_core import ConfigError, TrainerConfig
from clawrl.rl_core.train import ranks as ranks_mod
from clawrl.rl_core.train.loop import TrainError, TrainLoop
from clawrl.rl_core.train.ranks import DrivenTrainer, Ranks, follow
from clawrl.rl_core.trainer import Trainer

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from conftest import make_tiny_qwen3  # noqa: E402


class FakeRanks(Ranks):
    """A :class:`Ranks` without a process group: ``send`` records, ``recv`` replays."""

    def __init__(self, rank: int, commands: Sequence[tuple[Any, ...]] = ()) -> None:
        self.rank, self.world_size = rank, 2
        self.sent: list[tuple[Any, ...]] = []
        self.closed: list[list[Trainer]] = []
        self._commands = iter(commands)
        self._keys = 0
        self.trainers = []
        self.broken = self.stopped = False

    def send(self, command: tuple[Any, ...]) -> None:
        self.sent.append(command)

    def recv(self) -> tuple[Any, ...]:
        return next(self._commands)

    def close(self, trainers: Any) -> None:
        self.closed.append(list(trainers))


def _driven(ranks: FakeRanks) -> DrivenTrainer:
    cfg = TrainerConfig(seed=1)
    return DrivenTrainer(ranks, "/models/x", make_tiny_qwen3(torch.float32), cfg)


def test_rank0_sends_each_collective_call_then_stop() -> None:
    ranks = FakeRanks(0)
    t = _driven(ranks)
    assert ranks.sent[0][:3] == ("trainer", 1, "/models/x") and ranks.sent[0][4] is False
    t.policy_version = 7
    with pytest.raises(Exception):  # noqa: B017 - any error: an empty batch
        t.rl_step([], {})
    kind, key, method, args, kwargs, version = ranks.sent[1]
    assert (kind, key, method, args, kwargs, version) == (
        "call",
        1,
        "rl_step",
        ([], {}),
        {"groups": None},
        7,
    )
    # a Trainer call raised: the ranks may be inside a collective, so no stop is sent
    assert ranks.broken
    ranks.stop()
    assert len(ranks.sent) == 2 and ranks.closed == []


def test_stop_after_a_clean_run_closes_every_trainer_once() -> None:
    ranks = FakeRanks(0)
    t = _driven(ranks)
    ranks.stop()
    ranks.stop()
    assert ranks.sent[-1] == ("stop",) and ranks.closed == [[t]]


def test_follower_builds_trainers_and_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ranks_mod, "load_policy", lambda _: make_tiny_qwen3(torch.float32))
    cfg = TrainerConfig(seed=1)
    ranks = FakeRanks(1, [("trainer", 1, "/m", cfg, True), ("stop",)])
    follow(ranks, seed=0)
    (closed,) = ranks.closed
    assert len(closed) == 1 and closed[0].ref_model is not None


def test_follower_raises_on_an_unknown_command_without_closing() -> None:
    ranks = FakeRanks(1, [("bogus",)])
    with pytest.raises(RuntimeError, match="bogus"):
        follow(ranks, seed=0)
    assert ranks.closed == []  # rank 0 may be mid-collective: the launcher ends the rest


def test_train_cli_stops_the_followers_when_rank0_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from clawrl.rl_core import train_cli

    ranks = FakeRanks(0)
    monkeypatch.setattr(ranks_mod, "launch_ranks", lambda timeout_s: ranks)

    async def fail(self: TrainLoop) -> dict[str, Any]:
        assert self.ranks is ranks
        raise TrainError("rollouts failed")

    monkeypatch.setattr(TrainLoop, "run", fail)
    assert train_cli.main(["--no-progress", "--out", str(tmp_path)]) == 1
    assert ranks.sent == [("stop",)] and ranks.closed == [[]]
    assert "rollouts failed" in capsys.readouterr().err


def test_train_cli_follower_runs_no_loop(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from clawrl.rl_core import train_cli

    ranks = FakeRanks(1, [("stop",)])
    monkeypatch.setattr(ranks_mod, "launch_ranks", lambda timeout_s: ranks)
    monkeypatch.setattr(TrainLoop, "__init__", lambda *a, **k: pytest.fail("rank 1 ran a loop"))
    assert train_cli.main(["--no-progress", "--out", str(tmp_path)]) == 0
    assert ranks.closed == [[]]


def test_train_cli_refuses_fsdp_with_several_processes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """algo.fsdp is the Trainer's; the multi-process loop refuses it on every rank, before any
    rank waits for another."""
    from clawrl.rl_core import train_cli

    monkeypatch.setattr(ranks_mod, "launch_ranks", lambda timeout_s: pytest.fail("launched"))
    monkeypatch.setenv("WORLD_SIZE", "2")
    argv = ["--no-progress", "--out", str(tmp_path), "--set", "algo.fsdp=true"]
    assert train_cli.main(argv) == 2
    assert "algo.fsdp" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"algo\.fsdp"):
        DrivenTrainer(FakeRanks(0), tmp_path, torch.nn.Linear(1, 1), TrainerConfig(fsdp=True))
