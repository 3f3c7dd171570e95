"""Experiment trackers: ``[logging] tensorboard`` writes TensorBoard events and ``[logging]
wandb = "offline"`` a W&B run folder, both holding the rows' numbers; a resumed run continues
its W&B run; bad values are one-line config errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from clawrl.rl_core.errors import ConfigError
from clawrl.rl_core.train.config import load_config
from clawrl.rl_core.train.metrics_log import MetricsLog

ROWS = [
    {"kind": "train", "step": 1, "reward_mean/reference": 0.5, "skip": float("nan")},
    {"kind": "eval", "step": 1, "eval_reward": 0.375},
]


def test_tensorboard_events_hold_the_rows(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = MetricsLog(tmp_path, tensorboard=True)
    for row in ROWS:
        log.write(row)
    log.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    scalars = acc.Tags()["scalars"]
    assert "train/reward_mean/reference" in scalars and "eval/eval_reward" in scalars
    assert "train/skip" not in scalars  # not finite: not logged
    assert acc.Scalars("eval/eval_reward")[0].value == pytest.approx(0.375)


def _wandb_files(out: Path) -> list[Path]:
    return sorted((out / "wandb").glob("offline-run-*/run-*.wandb"))


def test_wandb_offline_run_holds_the_rows_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "elsewhere"))  # the run folder wins
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    out = tmp_path / "run"
    log = MetricsLog(out, wandb="offline", wandb_project="p", config={"algo": {"lr": 1e-6}})
    for row in ROWS:
        log.write(row)
    log.close()
    (first,) = _wandb_files(out)
    data = first.read_bytes()
    run_id = (out / "wandb" / "run-id").read_text().strip()
    assert run_id.encode() in data
    for key in (b"train/reward_mean/reference", b"eval/eval_reward", b"0.375"):
        assert key in data, key
    assert b"train/skip" not in data
    # a resumed run (same output folder) logs into the same W&B run id
    again = MetricsLog(out, wandb="offline", wandb_project="p")
    again.write({"kind": "train", "step": 2, "reward_mean/reference": 0.75})
    again.close()
    files = _wandb_files(out)
    assert len(files) == 2 and all(f.name == f"run-{run_id}.wandb" for f in files)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["logging.wandb='yes'"], "[logging] wandb must be 'offline', 'online' or ''"),
        (["logging.wandb='offline'", "logging.wandb_project=' '"], "[logging] wandb_project"),
    ],
)
def test_bad_tracker_settings_are_config_errors(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, overrides)
    assert str(info.value).startswith(message)
