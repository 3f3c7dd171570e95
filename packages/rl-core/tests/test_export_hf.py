"""``train export-hf CHECKPOINT DIR``: a checkpoint the loop wrote becomes a Hugging Face
model directory with the checkpoint's weights and the run model's tokenizer and template;
a folder that is not a checkpoint is exit 2 with one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from clawrl.proxy import ChatRenderer
from clawrl.rl_core import Trainer, TrainerConfig
from clawrl.rl_core.train import TrainConfig
from clawrl.rl_core.train.checkpoints import LoopState, save_checkpoint
from clawrl.rl_core.train.ranks import load_policy
from clawrl.rl_core.train_cli import main as train_main
from transformers import AutoModelForCausalLM


def test_export_hf_writes_the_checkpoints_policy(tmp_path: Path) -> None:
    run = tmp_path / "run"
    cfg = TrainConfig()
    cfg.run.out = str(run)
    (run / "checkpoints").mkdir(parents=True)
    cfg.save(run / "config.json")
    model_dir = cfg.model.build()
    policy = load_policy(model_dir)
    with torch.no_grad():  # weights unlike the run's starting model
        for p in policy.parameters():
            p.add_(0.5)
    trainer = Trainer(policy, TrainerConfig())
    ckpt = save_checkpoint(run / "checkpoints", trainer, LoopState(next_step=3), keep=1)

    out = tmp_path / "hf"
    assert train_main(["export-hf", str(ckpt), str(out)]) == 0
    exported = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    got, want = exported.state_dict(), policy.state_dict()
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in want)
    for name in ("tokenizer.json", "chat_template.jinja", "config.json"):
        assert (out / name).is_file()
    assert ChatRenderer.from_model_dir(out).encode("hi")  # the proxy serves it as is

    # a run folder means its latest checkpoint
    assert train_main(["export-hf", str(run), str(tmp_path / "hf2")]) == 0
    assert (tmp_path / "hf2" / "model.safetensors").is_file()


def test_export_hf_refuses_what_is_not_a_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert train_main(["export-hf", str(tmp_path), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"train export-hf: {tmp_path} is not a train checkpoint (no model.safetensors)"
    assert not (tmp_path / "out").exists()
