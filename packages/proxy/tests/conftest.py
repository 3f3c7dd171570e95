"""Shared fixtures of the proxy tests.

``model_dir``: the kit's byte-level default model (``build_default_model("byte")``) when the
kit is available, else a throwaway byte-level tokenizer directory built here following the
same chat-template contract (tokenizer files only; enough for the scripted and null backends).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
]
TEMPLATE = Path(__file__).resolve().parents[1] / "src/clawrl/proxy/templates/qwen3_chatml.jinja"


def _bytes_to_unicode() -> dict[int, str]:
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}


def build_byte_tokenizer_dir(path: Path) -> Path:
    """A byte-level tokenizer (256 byte ids + the ChatML/tool/think tokens at 256..264)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: b for b, ch in _bytes_to_unicode().items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok)
    fast.add_special_tokens({"additional_special_tokens": SPECIALS})
    fast.eos_token = "<|im_end|>"
    fast.pad_token = "<|endoftext|>"
    fast.chat_template = TEMPLATE.read_text()
    path.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(path))
    im_end = fast.convert_tokens_to_ids("<|im_end|>")
    eot = fast.convert_tokens_to_ids("<|endoftext|>")
    (path / "generation_config.json").write_text(json.dumps({"eos_token_id": [im_end, eot]}))
    (path / "config.json").write_text(json.dumps({"max_position_embeddings": 32768}))
    return path


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        from clawrl.proxy.model_kit import build_default_model  # type: ignore[attr-defined]
    except ImportError:
        return build_byte_tokenizer_dir(tmp_path_factory.mktemp("byte-model"))
    return Path(build_default_model("byte"))


@pytest.fixture(scope="session")
def renderer(model_dir: Path) -> Any:
    from clawrl.proxy import ChatRenderer

    return ChatRenderer.from_model_dir(model_dir)


@pytest.fixture
def scripted(model_dir: Path) -> Any:
    from clawrl.proxy import ScriptedBackend

    return ScriptedBackend.from_model_dir(model_dir)


@pytest.fixture
def proxy(renderer: Any, scripted: Any, tmp_path: Path) -> Iterator[Any]:
    """A ProxyApp over the scripted backend with a capture dir (in-process)."""
    from clawrl.proxy import ServerConfig, build_proxy_app

    app = build_proxy_app(
        renderer,
        scripted,
        ServerConfig(socket="unused", admin_socket="unused", capture_dir=str(tmp_path / "cap")),
    )
    yield app
