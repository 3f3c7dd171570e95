"""``[rollout] harnesses`` takes bench's names, entry points and import paths
``module:Class``; a bad one stops ``train`` at the config, exit 2, one line naming the key."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from clawrl.rl_core.errors import ConfigError
from clawrl.rl_core.train import load_config
from clawrl.rl_core.train_cli import main as train_main

HARNESS = """
from clawrl.bench.harness import HarnessAdapter, HarnessLaunch


class Mine(HarnessAdapter):
    name = "mine"

    def launch(self, ctx):
        return HarnessLaunch(argv=("true",))
"""


def test_an_import_path_harness_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "train_byo_harness.py").write_text(HARNESS)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    cfg = load_config(None, ['rollout.harnesses=["reference", "train_byo_harness:Mine"]'])
    assert cfg.rollout.harnesses == ["reference", "train_byo_harness:Mine"]


def test_a_bad_harness_is_a_config_error_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"^\[rollout\] harnesses: unknown harness 'refrence'"):
        load_config(None, ['rollout.harnesses=["refrence"]'])
    with pytest.raises(ConfigError, match=r"^\[rollout\] harnesses: .*cannot import no_such_mod"):
        load_config(None, ['rollout.harnesses=["no_such_mod:Agent"]'])


def test_train_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    config = tmp_path / "bad.toml"
    config.write_text(f'[run]\nout = "{out}"\n[rollout]\nharnesses = ["no_such_mod:Agent"]\n')
    assert train_main(["--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("train: config error: [rollout] harnesses: harness 'no_such_mod:Agent'")
    assert len(err.splitlines()) == 1
    assert not out.exists()  # stopped before the run folder


USER_HARNESS = (
    HARNESS
    + """

class WithUser(Mine):
    name = "with-user"
    plays_user = True
"""
)


def test_user_model_needs_a_harness_that_plays_a_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``rollout.user_model`` serves a model for a simulated user: with no harness that has
    one it would be served for nothing, so the config refuses it, naming the key."""
    with pytest.raises(ConfigError, match=r"^rollout\.user_model .*none of the harnesses"):
        load_config(None, ['rollout.user_model="qwen2.5-coder-0.5b-instruct"'])
    (tmp_path / "train_user_harness.py").write_text(USER_HARNESS)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    for section in ("rollout", "eval"):  # a training or an evaluation harness
        cfg = load_config(
            None,
            ['rollout.user_model="m"', f'{section}.harnesses=["train_user_harness:WithUser"]'],
        )
        assert cfg.rollout.user_model == "m"


def test_a_user_model_typo_stops_train_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "train_user_harness.py").write_text(USER_HARNESS)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    out = tmp_path / "run"
    argv = ["--set", 'rollout.harnesses=["train_user_harness:WithUser"]', "--out", str(out)]
    argv += ["--set", f'rollout.user_model="{tmp_path / "no-such-model"}"', "--no-progress"]
    assert train_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "user_model" in err[0], err
    assert not out.exists()  # refused before the run folder
