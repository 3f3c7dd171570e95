"""GGUF inspection and conversion of a real model (``clawrl.proxy.model_fetch``, steps 3-4):
the ``general.*`` metadata, then transformers' GGUF loader dequantizes to a float32 HF
directory whose reload is checked against the GGUF model's logits."""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any

from clawrl.proxy.model_kit import ModelKitError
from clawrl.proxy.model_spec import InvalidModelDirError

logger = logging.getLogger("clawrl.proxy.model_fetch")

#: GGUF metadata keys recorded in the manifest (when present).
_GGUF_KEYS = (
    "general.name",
    "general.architecture",
    "general.license",
    "general.basename",
    "general.finetune",
    "general.size_label",
    "general.organization",
    "general.file_type",
    "general.quantization_version",
)


def read_gguf_metadata(path: Path | str) -> dict[str, Any]:
    """The ``general.*`` metadata of a GGUF file (``general.name``, ``general.architecture``,
    ``general.license``, ... as far as present), plus ``tokenizer.chat_template`` presence
    as ``"has_chat_template"``.

    Raises:
        ModelKitError: the file is not a readable GGUF.
    """
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(path))
    except Exception as exc:  # the gguf package raises ValueError, struct.error, ...
        raise ModelKitError(f"{path} is not a readable GGUF file: {exc}") from exc
    meta: dict[str, Any] = {}
    for key in _GGUF_KEYS:
        fld = reader.fields.get(key)
        if fld is not None:
            value = fld.contents()
            meta[key] = value if isinstance(value, str | int | float | bool) else str(value)
    meta["has_chat_template"] = "tokenizer.chat_template" in reader.fields
    return meta


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str] = {}
    for dist in ("transformers", "torch", "gguf", "tokenizers"):
        with contextlib.suppress(PackageNotFoundError):
            out[dist] = version(dist)
    return out


def _convert_gguf(gguf_path: Path, out: Path, *, verify: bool = True) -> dict[str, Any]:
    """Dequantize ``gguf_path`` to a float32 HF directory ``out`` (model, tokenizer, chat
    template, generation config). Returns the manifest fields of the conversion."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    src, fname = str(gguf_path.parent), gguf_path.name
    logger.info("%s: loading and dequantizing the GGUF (float32)", fname)
    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=fname, dtype=torch.float32)
    model.eval()
    tok = AutoTokenizer.from_pretrained(src, gguf_file=fname)
    if not getattr(tok, "chat_template", None):
        raise InvalidModelDirError(f"{fname}: the GGUF has no chat template")
    probe_text = tok.apply_chat_template(
        [{"role": "user", "content": "Write hello world in Python."}],
        add_generation_prompt=True,
        tokenize=False,
    )
    probe = torch.tensor([tok.encode(probe_text, add_special_tokens=False)])
    with torch.no_grad():
        reference = model(probe).logits if verify else None
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    out.mkdir(parents=True, exist_ok=True)
    logger.info("%s: saving safetensors to %s", fname, out)
    model.save_pretrained(str(out), safe_serialization=True)
    parameters = sum(p.numel() for p in model.parameters())
    eos = _eos_ids(model, tok)
    del model
    tok.save_pretrained(str(out))
    GenerationConfig(
        bos_token_id=tok.bos_token_id,
        eos_token_id=eos if len(eos) > 1 else eos[0],
        pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else eos[0],
    ).save_pretrained(str(out))
    _fix_configs(out, tok.chat_template)
    result: dict[str, Any] = {"parameters": parameters, "dtype": "float32"}
    if verify:
        logger.info("%s: reloading %s to compare logits", fname, out)
        again = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
        again.eval()
        AutoTokenizer.from_pretrained(str(out))
        with torch.no_grad():
            diff = float((again(probe).logits - reference).abs().max())
        del again
        if not diff <= 1e-4:
            raise InvalidModelDirError(
                f"{fname}: the saved model's logits differ from the GGUF model's by {diff}"
            )
        result["reload_max_abs_logit_diff"] = diff
    return result


def _eos_ids(model: Any, tok: Any) -> list[int]:
    ids: list[int] = []
    cfg_eos = getattr(model.generation_config, "eos_token_id", None)
    for value in (tok.eos_token_id, cfg_eos):
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, int) and item not in ids:
                ids.append(item)
    if not ids:
        raise InvalidModelDirError("the GGUF names no end-of-sequence token")
    # as upstream Qwen2.5's generation_config: a model that ends the document stops too
    endoftext = tok.get_vocab().get("<|endoftext|>")
    if isinstance(endoftext, int) and endoftext not in ids:
        ids.append(endoftext)
    return ids


def _fix_configs(out: Path, template: str) -> None:
    """Make the saved files readable by older readers too (as the default kit does):
    ``rope_theta`` / ``torch_dtype`` in ``config.json``; the chat template and a class name
    every transformers version knows in ``tokenizer_config.json``."""
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text())
    rope = cfg.get("rope_parameters")
    if isinstance(rope, dict) and "rope_theta" in rope:
        cfg.setdefault("rope_theta", rope["rope_theta"])
    cfg.pop("_model_name_or_path", None)
    cfg["torch_dtype"] = "float32"
    cfg["dtype"] = "float32"
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    tcfg_path = out / "tokenizer_config.json"
    tcfg = json.loads(tcfg_path.read_text())
    for key in ("is_local", "local_files_only"):
        tcfg.pop(key, None)
    tcfg["chat_template"] = template
    tcfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    if isinstance(cfg.get("max_position_embeddings"), int):
        tcfg["model_max_length"] = cfg["max_position_embeddings"]
    tcfg_path.write_text(json.dumps(tcfg, indent=2, ensure_ascii=False, sort_keys=True) + "\n")
    if not (out / "chat_template.jinja").exists():
        (out / "chat_template.jinja").write_text(template, encoding="utf-8")
    for path in out.iterdir():  # safetensors writes 0600 files
        if path.is_file():
            path.chmod(0o644)
