"""``train export-hf CHECKPOINT DIR``: a train run's checkpoint as a Hugging Face model
directory (``config.json``, ``model.safetensors``, the tokenizer and chat template of the
run's model), which transformers, the proxy (``proxy serve --model DIR``) and SGLang load.

CHECKPOINT is a checkpoint folder (``<run.out>/checkpoints/step-NNNNNN``) or a run folder
(its latest checkpoint). The model it started from comes from the run's ``config.json``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from clawrl.rl_core.errors import ConfigError

__all__ = ["export_checkpoint"]

#: files of the run's model directory copied next to the exported weights
MODEL_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "generation_config.json",
)


def _checkpoint(path: Path) -> Path:
    from clawrl.rl_core.train.checkpoints import latest_checkpoint

    if (path / "checkpoints").is_dir():  # a run folder
        latest = latest_checkpoint(path / "checkpoints")
        if latest is None:
            raise ConfigError(f"{path}: no checkpoint under {path / 'checkpoints'}")
        path = latest
    if not (path / "model.safetensors").is_file():
        if (path / "loop_state.json").is_file():
            raise ConfigError(
                f"{path} is a sharded checkpoint (several processes): export it from a run "
                "with Trainer.export_hf"
            )
        raise ConfigError(f"{path} is not a train checkpoint (no model.safetensors)")
    return path


def export_checkpoint(checkpoint: str | Path, out: str | Path) -> Path:
    """Write the policy of ``checkpoint`` to ``out`` as an HF model directory; returns it.

    Raises:
        ConfigError: not a checkpoint or run folder, no ``config.json`` in its run, ``out``
            exists and is not empty, or weights that do not fit the run's model.
    """
    import torch
    from clawrl.proxy import ModelKitError, resolve_model
    from clawrl.rl_core.train.config import load_config
    from clawrl.rl_core.train.ranks import load_policy
    from safetensors.torch import load_model

    src = _checkpoint(Path(checkpoint))
    dest = Path(out)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ConfigError(f"{dest} exists and is not an empty folder")
    run_config = src.parent.parent / "config.json"
    if not run_config.is_file():
        raise ConfigError(f"no {run_config}: the run's model is read from it")
    run = load_config(run_config)
    model, lora = run.model, run.algo.trainer.lora
    try:
        model_dir = resolve_model(os.path.expanduser(model.path)) if model.path else model.build()
    except ModelKitError as exc:
        raise ConfigError(f"[model] path: {exc}") from exc

    class Checkpointed(torch.nn.Module):  # the trainer's module: the policy as ``policy``
        def __init__(self, policy: torch.nn.Module) -> None:
            super().__init__()
            self.policy = policy

    policy = load_policy(model_dir)
    if lora is not None:  # a LoRA run's checkpoint: base weights and adapters
        from clawrl.rl_core.lora import add_lora

        add_lora(policy, lora)
    missing, unexpected = load_model(
        Checkpointed(policy), str(src / "model.safetensors"), strict=False
    )
    unexpected = [k for k in unexpected if k.startswith("policy.")]  # not the value head
    if missing or unexpected:
        raise ConfigError(
            f"{src}: the weights do not fit {model_dir} (missing {missing[:3]}, "
            f"unexpected {unexpected[:3]})"
        )
    dest.mkdir(parents=True, exist_ok=True)
    if lora is None:
        policy.save_pretrained(dest)  # type: ignore[operator]
    else:  # the merged weights W + scale·BA, in the plain layout
        from clawrl.rl_core.lora import merged_state_dict

        policy.save_pretrained(dest, state_dict=merged_state_dict(policy))  # type: ignore[operator]
    for name in MODEL_FILES:
        if (Path(model_dir) / name).is_file():
            shutil.copy2(Path(model_dir) / name, dest / name)
    return dest
