"""Real SGLang (slow): sglang==0.5.23 from its own cached environment, on the CPU.

The session fixture installs the environment if missing (``tools/sglang/install.sh``,
cached in ``~/.cache/clawrl/sglang-0.5.23/`` across runs) and starts one server for the
whole session with the kit's tiny byte-level Qwen3 model (float32). The server runs in
its own process group and is always killed (fixture finaliser, weakref finaliser, parent
death signal); every test has a pytest-timeout.

The logprob mismatch figure (SGLang vs a plain transformers forward of the same weights at
the same temperature) is printed, and written to tools/perf/results/sglang_mismatch.json with
CLAWRL_WRITE_RESULTS=1.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import platform
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from clawrl.proxy.backends.base import (
    GenerationRequest,
    GenerationResult,
    SamplingParams,
    TokenDelta,
)
from clawrl.proxy.backends.sglang import InvalidTokenIdError, SGLangBackend
from clawrl.proxy.sglang_launcher import (
    DEFAULT_SGLANG_VERSION,
    SGLangServer,
    default_sglang_env,
    launch_sglang,
)

from .conftest import collect_generation

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

REPO = Path(__file__).resolve().parents[3]
RESULTS = REPO / "tools" / "perf" / "results" / "sglang_mismatch.json"


# ------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def sglang_python() -> Path:
    """The SGLang environment's interpreter, installing the environment when missing."""
    env = default_sglang_env()
    if not (env / ".clawrl-complete").exists():
        t0 = time.monotonic()
        subprocess.run(
            ["bash", str(REPO / "tools" / "sglang" / "install.sh")], check=True, timeout=1800
        )
        print(
            f"\n[sglang] installed sglang=={DEFAULT_SGLANG_VERSION} in {time.monotonic() - t0:.0f} s"
        )
    return env / "bin" / "python"


@pytest.fixture(scope="module")  # stop SGLang (its CPU scheduler busy-polls) once these tests end
def sglang_server(
    sglang_python: Path, model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SGLangServer]:
    log = tmp_path_factory.mktemp("sglang") / "server.log"
    server = launch_sglang(
        model_dir,
        python=sglang_python,
        device="cpu",
        dtype="float32",
        log_path=log,
        startup_timeout_s=900,
        progress=False,
    )
    print(f"\n[sglang] server up at {server.url} after {server.startup_s:.0f} s (log {log})")
    try:
        yield server
    finally:
        server.stop()
        assert not server.alive


@pytest.fixture
async def backend(sglang_server: SGLangServer) -> AsyncIterator[SGLangBackend]:
    b = SGLangBackend(sglang_server.url)
    await b.start()
    try:
        yield b
    finally:
        await b.close()


def chat_prompt(renderer: Any, text: str) -> list[int]:
    return list(
        renderer.encode(
            renderer.render_text(
                [{"role": "user", "content": text}], None, add_generation_prompt=True
            )
        )
    )


async def run(
    b: SGLangBackend, prompt: list[int], rid: str, **sampling: Any
) -> tuple[list[TokenDelta], GenerationResult]:
    return await collect_generation(b, GenerationRequest(rid, prompt, SamplingParams(**sampling)))


# ------------------------------------------------------------------------------- tests


async def test_generate_with_logprobs(
    backend: SGLangBackend, renderer: Any, sglang_server: SGLangServer
) -> None:
    assert backend.vocab_size == renderer.vocab_size
    assert backend.max_context == 8192  # the CPU KV-cache cap
    prompt = chat_prompt(renderer, "Say hello.")
    stops = tuple(renderer.stop_token_ids)
    deltas, result = await run(
        backend, prompt, "gen-1", max_tokens=24, temperature=1.0, stop_token_ids=stops
    )
    ids, lps = result.completion_ids, result.completion_logprobs
    assert 0 < len(ids) == len(lps) <= 24
    assert [t for d in deltas for t in d.token_ids] == ids
    assert [lp for d in deltas for lp in d.logprobs] == lps
    assert all(0 <= t < backend.vocab_size for t in ids)
    assert all(math.isfinite(lp) and lp <= 0.0 for lp in lps)
    if result.finish_reason == "stop":
        assert ids[-1] in stops  # the stop token is part of the completion
    else:
        assert result.finish_reason == "length" and len(ids) == 24
    assert result.policy_version == result.policy_version_end == backend.policy_version

    # the request that would crash the CPU server is refused before it is sent
    with pytest.raises(InvalidTokenIdError):
        await run(backend, [*prompt, backend.vocab_size], "gen-bad", max_tokens=4)
    assert await backend.health() and sglang_server.alive


async def test_weight_update_changes_logprobs_and_reload_is_bit_identical(
    backend: SGLangBackend, renderer: Any, model_dir: Path, other_model_dir: Path
) -> None:
    prompt = chat_prompt(renderer, "Count to five.")

    async def greedy(rid: str) -> GenerationResult:
        return (await run(backend, prompt, rid, max_tokens=16, temperature=0.0))[1]

    await backend.update_weights(str(model_dir), 10)  # also flushes the prefix cache
    a = await greedy("w-a")
    await backend.update_weights(str(other_model_dir), 11)
    b = await greedy("w-b")
    await backend.update_weights(str(model_dir), 12)
    c = await greedy("w-c")

    assert (a.policy_version, b.policy_version, c.policy_version) == (10, 11, 12)
    assert b.policy_version_end == 11 and backend.policy_version == 12
    n = min(len(a.completion_logprobs), len(b.completion_logprobs))
    diff = max(
        abs(x - y)
        for x, y in zip(a.completion_logprobs[:n], b.completion_logprobs[:n], strict=True)
    )
    assert a.completion_ids != b.completion_ids or diff > 1e-4, "other weights, same logprobs"
    assert c.completion_ids == a.completion_ids
    assert c.completion_logprobs == a.completion_logprobs  # bit-identical after reloading


async def test_weights_changed_mid_generation_are_recorded(
    backend: SGLangBackend, renderer: Any, model_dir: Path, other_model_dir: Path
) -> None:
    """pause (retract) -> load other weights -> resume while a generation runs: the result
    spans two policy versions. (``ignore_eos`` so that the generation surely outlives the
    switch.)"""
    await backend.update_weights(str(model_dir), 20)
    backend = SGLangBackend(backend.base_url, extra_sampling_params={"ignore_eos": True})
    await backend.start()
    prompt = chat_prompt(renderer, "Write a long story.")
    switched: asyncio.Task[None] | None = None

    async def switch() -> None:
        await backend.pause()
        await backend.update_weights(str(other_model_dir), 21)
        await backend.resume()

    n = 0
    result = None
    async for item in backend.generate(
        GenerationRequest("mid", prompt, SamplingParams(max_tokens=200, temperature=1.0, seed=0))
    ):
        if isinstance(item, TokenDelta):
            n += len(item.token_ids)
            if switched is None and n >= 4:
                switched = asyncio.create_task(switch())
        else:
            result = item
    assert switched is not None
    await switched
    assert result is not None
    assert (result.finish_reason, len(result.completion_ids)) == ("length", 200)
    assert (result.policy_version, result.policy_version_end) == (20, 21)
    spans = result.extra["weight_versions"]
    assert [s["version"] for s in spans] == ["20", "21"]
    assert spans[0]["start"] == 0 and 4 <= spans[0]["end"] == spans[1]["start"] < 200
    assert spans[-1]["end"] == 200
    await backend.update_weights(str(model_dir), 22)
    assert backend.policy_version == 22
    await backend.close()


def test_sdk_conversation_through_the_proxy(
    live_factory: Any,
    sglang_server: SGLangServer,
    renderer: Any,
    model_dir: Path,
    other_model_dir: Path,
) -> None:
    """The official openai SDK, streamed and not, through the proxy on the sglang backend;
    a weight load through the admin API changes the records' logprobs and policy version."""
    live = live_factory(SGLangBackend(sglang_server.url))
    with live.admin() as admin:
        assert admin.load_weights(str(model_dir), 30) == 30
        s = admin.create_session(run_id="sglang", task_id="t", harness="openai-sdk")
    client = openai.OpenAI(
        base_url=s.openai_base_url, api_key=s.api_key, http_client=live.http_client()
    )
    messages: list[Any] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi!"},
    ]
    r1 = client.chat.completions.create(
        model="tiny", messages=messages, max_completion_tokens=24, temperature=0.0
    )
    assert r1.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert r1.usage is not None and 0 < r1.usage.completion_tokens <= 24
    messages.append({"role": "assistant", "content": r1.choices[0].message.content or ""})
    messages.append({"role": "user", "content": "And again, streamed."})
    text, finish = "", None
    for chunk in client.chat.completions.create(
        model="tiny",
        messages=messages,
        max_completion_tokens=24,
        temperature=0.0,
        stream=True,
        stream_options={"include_usage": True},
    ):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    assert finish in ("stop", "length", "tool_calls")

    with live.admin() as admin:
        assert admin.load_weights(str(other_model_dir), 31) == 31
    r3 = client.chat.completions.create(
        model="tiny", messages=messages[:2], max_completion_tokens=24, temperature=0.0
    )
    assert r3.choices[0].finish_reason in ("stop", "length", "tool_calls")
    with live.admin() as admin:
        recs = admin.records(s.session_id)
        assert admin.load_weights(str(model_dir), 32) == 32

    assert [r["seq"] for r in recs] == [0, 1, 2]
    for rec in recs:
        assert 0 < len(rec["completion_ids"]) == len(rec["completion_logprobs"]) <= 24
        assert all(lp <= 0.0 for lp in rec["completion_logprobs"])
        assert rec["finish_reason"] in ("stop", "length", "tool_calls")
    assert [r["policy_version"] for r in recs] == [30, 30, 31]
    # the second call's prompt contains the first call's prompt and exact generated ids
    first = recs[0]["prompt_ids"] + recs[0]["completion_ids"]
    assert recs[1]["prompt_ids"][: len(first)] == first
    # same prompt (call 0 vs call 2), other weights: other logprobs
    assert recs[2]["prompt_ids"] == recs[0]["prompt_ids"]
    assert recs[2]["completion_logprobs"] != recs[0]["completion_logprobs"]


async def test_logprob_mismatch_against_transformers(
    backend: SGLangBackend, renderer: Any, model_dir: Path
) -> None:
    """|SGLang logprob - trainer recompute| per generated token, where the recompute is a
    plain transformers forward of the same float32 weights, log_softmax(logits / T)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    await backend.update_weights(str(model_dir), 40)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.eval()
    prompts = [
        "Hello!",
        "List three colours.",
        "What is 2 + 2?",
        "Write a haiku about the sea.",
        "Explain recursion briefly.",
        "Translate 'cat' into French.",
    ]
    report: dict[str, Any] = {"temperatures": {}}
    all_diffs: list[float] = []
    for temperature in (1.0, 0.7):
        diffs: list[float] = []
        for i, text in enumerate(prompts):
            prompt = chat_prompt(renderer, text)
            _, res = await run(
                backend,
                prompt,
                f"mm-{temperature}-{i}",
                max_tokens=32,
                temperature=temperature,
                seed=i,
            )
            ids = torch.tensor([prompt + res.completion_ids])
            with torch.no_grad():
                logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
            ref = torch.log_softmax(logits / temperature, dim=-1)
            ref_lp = ref.gather(1, torch.tensor(res.completion_ids)[:, None])[:, 0].tolist()
            diffs += [abs(a - b) for a, b in zip(res.completion_logprobs, ref_lp, strict=True)]
        diffs.sort()
        report["temperatures"][str(temperature)] = {
            "tokens": len(diffs),
            "max_abs": diffs[-1],
            "mean_abs": sum(diffs) / len(diffs),
            "p99_abs": diffs[min(len(diffs) - 1, int(0.99 * len(diffs)))],
        }
        all_diffs += diffs
    all_diffs.sort()
    report.update(
        {
            "what": "|SGLang logprob - transformers recompute| per generated token",
            "sglang_version": DEFAULT_SGLANG_VERSION,
            "device": "cpu",
            "dtype": "float32",
            "attention_backend": "torch_native",
            "model": model_dir.name,
            "prompts": len(prompts),
            "max_new_tokens": 32,
            "tokens": len(all_diffs),
            "max_abs": all_diffs[-1],
            "mean_abs": sum(all_diffs) / len(all_diffs),
            "machine": platform.machine(),
            "command": "uv run pytest packages/proxy/tests/test_sglang_real.py -k mismatch",
        }
    )
    if os.environ.get("CLAWRL_WRITE_RESULTS") == "1":  # a test run leaves the tree clean
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\n[sglang] logprob mismatch vs transformers: {json.dumps(report, indent=1)}")
    assert report["tokens"] >= 2 * len(prompts)
    # float32 on both sides: differences are rounding-level (a bf16 engine would be ~1e-2)
    assert report["max_abs"] < 1e-3
