"""Serving options of the embedded backend (dtype, threads, prefix cache) and the prefix KV
shared across sessions: paid once per policy version, dropped at a weight update."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from clawrl.proxy.backends.base import GenerationRequest, GenerationResult, SamplingParams
from clawrl.proxy.backends.embedded import EmbeddedBackend
from clawrl.proxy.backends.embedded_kv import PrefixCache, common_prefix_len
from clawrl.proxy.cli import main as proxy_main
from clawrl.proxy.serving import BackendConfig, make_backend

# a "system prompt + tool list" every session starts with, then each session's own turn
SYSTEM = [256 + 1, *b"system\nYou are a coding agent. Tools: read, write, bash.", 256 + 2, 10]


def turn(text: bytes) -> list[int]:
    return [*SYSTEM, 256 + 1, *b"user\n", *text, 256 + 2, 10, 256 + 1, *b"assistant\n"]


async def run(be: EmbeddedBackend, rid: str, prompt: list[int], **kw: Any) -> GenerationResult:
    kw.setdefault("max_tokens", 4)
    kw.setdefault("temperature", 0.0)
    async for item in be.generate(GenerationRequest(rid, prompt, SamplingParams(**kw))):
        if isinstance(item, GenerationResult):
            return item
    raise AssertionError("no GenerationResult")


def recompute(model: Any, prompt: list[int], completion: list[int], t: float) -> list[float]:
    """The logprob of each completion token under ``log_softmax(logits / T)``: one full
    forward of the model (in its own dtype), logits upcast to float32."""
    ids = torch.tensor([prompt + completion])
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0].float()
    lp = torch.log_softmax(logits / t, -1)
    rows = range(len(prompt) - 1, len(prompt) + len(completion) - 1)
    return [float(lp[r, tok]) for r, tok in zip(rows, completion, strict=True)]


# --------------------------------------------------------------------------- options


def test_serving_options_reach_the_backend(model_dir: Path, tmp_path: Path) -> None:
    be = make_backend(
        BackendConfig(kind="embedded", model_dir=model_dir, dtype="bf16", prefix_cache_mib=1.5)
    )
    assert isinstance(be, EmbeddedBackend)
    assert be.dtype == torch.bfloat16
    assert be.prefix_cache_bytes == int(1.5 * 2**20)
    # a 2-layer test model: one thread (its operations are too small to split)
    assert be.num_threads == 1
    be = make_backend(BackendConfig(kind="embedded", model_dir=model_dir, num_threads=3))
    assert isinstance(be, EmbeddedBackend)
    assert (be.num_threads, be.dtype) == (3, torch.float32)
    # a real-size model follows the machine: every core this process may run on
    cfg = json.loads((model_dir / "config.json").read_text())
    cfg.update(hidden_size=896, num_hidden_layers=24, vocab_size=151936)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert EmbeddedBackend(tmp_path).num_threads == len(os.sched_getaffinity(0))
    cfg = BackendConfig(kind="embedded", model_dir=tmp_path, num_threads=0)
    assert getattr(make_backend(cfg), "num_threads", None) == len(os.sched_getaffinity(0))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("dtype", "fp16", "dtype must be one of fp32, bf16, auto, got 'fp16'"),
        ("num_threads", -1, "num_threads must be >= 1 (0: follow the machine), got -1"),
        ("prefix_cache_mib", -2.0, "prefix_cache_mib must be >= 0 (0: off), got -2.0"),
    ],
)
def test_bad_serving_options_are_one_line_errors(
    model_dir: Path, field: str, value: Any, message: str
) -> None:
    cfg = BackendConfig(kind="embedded", model_dir=model_dir, **{field: value})
    with pytest.raises(ValueError) as err:
        make_backend(cfg)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--dtype", "fp16"], "proxy serve: --dtype must be one of fp32, bf16, auto, got 'fp16'\n"),
        (
            ["--threads", "-1"],
            "proxy serve: --threads must be >= 1 (0: follow the machine), got -1\n",
        ),
        (
            ["--prefix-cache-mib", "-1"],
            "proxy serve: --prefix-cache-mib must be >= 0 (0: off), got -1.0\n",
        ),
    ],
)
def test_bad_serving_flags_exit_2(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["serve", "--socket", str(tmp_path / "m"), "--admin-socket", str(tmp_path / "a")]
    assert proxy_main([*argv, *flags]) == 2
    assert capsys.readouterr().err == message


# --------------------------------------------------------------------------- bf16


async def test_bf16_logprobs_are_those_of_the_sampled_distribution(model_dir: Path) -> None:
    """bf16 serving records the logprob of the distribution it sampled from: the engine's
    own bf16 model, recomputing prompt + completion in one forward, gives the same values
    (to bf16 rounding: cached decoding and a full forward round differently)."""
    be = make_backend(
        BackendConfig(kind="embedded", model_dir=model_dir, dtype="bf16", prefix_cache_mib=0)
    )
    assert isinstance(be, EmbeddedBackend)
    try:
        prompts = [turn(b"hello"), turn(b"write a file called notes.txt please")]
        results = await asyncio.gather(
            *(
                run(be, f"b{i}", p, max_tokens=12, temperature=t, seed=i)
                for i, (p, t) in enumerate(zip(prompts, (1.0, 0.7), strict=True))
            )
        )
        assert {p.dtype for p in be.model.parameters()} == {torch.bfloat16}
        for p, t, r in zip(prompts, (1.0, 0.7), results, strict=True):
            got = torch.tensor(r.completion_logprobs)
            assert len(got) == 12 and torch.isfinite(got).all() and (got <= 0).all()
            want = torch.tensor(recompute(be.model, p, list(r.completion_ids), t))
            assert (got - want).abs().max() < 0.05, (got, want)
    finally:
        await be.close()


# --------------------------------------------------------------------------- shared prefix


async def test_sessions_share_the_system_prompt_kv(model_dir: Path) -> None:
    """Prompts admitted together that share a system prompt prefill it once; a session that
    arrives while another with the same system prompt still runs reuses its KV; the
    logprobs equal those computed without any reuse."""
    prompts = [turn(b"task %d" % i) for i in range(4)]
    plain = EmbeddedBackend(model_dir, seed=0, prefix_cache_bytes=0)
    be = EmbeddedBackend(model_dir, seed=0)
    try:
        want = [await run(plain, f"p{i}", p) for i, p in enumerate(prompts)]
        await be.start()
        await be.pause()  # the four arrive together: admitted in one group
        tasks = [asyncio.create_task(run(be, f"s{i}", p)) for i, p in enumerate(prompts)]
        while len(be._inflight) < 4:
            await asyncio.sleep(0.01)
        await be.resume()
        got = await asyncio.gather(*tasks)
        shared = len(SYSTEM) + len(b"\x01user\ntask ")  # common to the four prompts
        assert be.stats["shared_prefills"] == 1
        assert be.stats["shared_prefill_tokens"] == shared
        assert be.stats["prefix_hit_tokens"] == 4 * shared
        assert be.stats["prefill_tokens"] == shared + sum(len(p) - shared for p in prompts)
        for w, g in zip(want, got, strict=True):
            assert w.completion_ids == g.completion_ids
            assert (
                max(
                    abs(a - b)
                    for a, b in zip(w.completion_logprobs, g.completion_logprobs, strict=True)
                )
                < 1e-4
            )

        # a session arriving while another one with the same system prompt is running
        long = be.generate(
            GenerationRequest(
                "long", turn(b"other"), SamplingParams(max_tokens=64, temperature=1.0)
            )
        )
        await anext(long)  # admitted and prefilled: its prompt KV is kept from now on
        hits = be.stats["prefix_hit_tokens"]
        late = await run(be, "late", turn(b"otherwise"))
        assert be.stats["prefix_hit_tokens"] - hits == common_prefix_len(
            turn(b"other"), turn(b"otherwise")
        )
        assert late.finish_reason == "length"
        await long.aclose()
    finally:
        await be.close()
        await plain.close()


async def test_weight_update_drops_the_shared_prefix_kv(
    model_dir: Path, other_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a weight update no session reuses KV computed with the old weights: its
    logprobs are the new weights' own. Keeping the stale prefix (the drop disabled) would
    record other logprobs, which this test detects."""
    reference = EmbeddedBackend(other_model_dir, seed=0, prefix_cache_bytes=0)
    prompt_b = turn(b"second session")
    want = (await run(reference, "ref", prompt_b, max_tokens=1)).completion_logprobs[0]
    await reference.close()

    async def after_update() -> tuple[float, int]:
        be = EmbeddedBackend(model_dir, seed=0)
        try:
            await run(be, "a", turn(b"first session"), max_tokens=1)  # keeps SYSTEM's KV
            await be.update_weights(str(other_model_dir), version=1)
            hits = be.stats["prefix_hit_tokens"]
            res = await run(be, "b", prompt_b, max_tokens=1)
            assert res.policy_version == 1
            return res.completion_logprobs[0], be.stats["prefix_hit_tokens"] - hits
        finally:
            await be.close()

    got, reused = await after_update()
    assert reused == 0
    assert abs(got - want) < 1e-4
    # the same run keeping the old weights' prefix KV records wrong logprobs
    monkeypatch.setattr(PrefixCache, "clear", lambda self: None)
    stale, reused = await after_update()
    assert reused > len(SYSTEM)
    assert abs(stale - want) > 1e-2, (stale, want)


def test_admin_status_reports_prefix_cache_counters(model_dir: Path, live_factory: Any) -> None:
    be = EmbeddedBackend(model_dir, seed=0)
    live = live_factory(be)
    with live.admin() as admin:
        system = {"role": "system", "content": "You are a coding agent. " * 8}
        for i in range(2):
            s = admin.create_session()
            body = {
                "model": "m",
                "max_tokens": 2,
                "messages": [system, {"role": "user", "content": f"task {i}"}],
            }
            r = live.http_client().post(
                f"{s.openai_base_url}/chat/completions".replace(
                    "http://127.0.0.1:8000", "http://x"
                ),
                json=body,
                headers={"authorization": f"Bearer {s.api_key}"},
            )
            assert r.status_code == 200, r.text
        stats = admin.status()["backend_stats"]
    assert stats["prefix_lookups"] == 2
    assert stats["prefix_hits"] == 1  # the second session reused the first one's system prompt
    assert stats["prefix_hit_tokens"] > 8 * len("You are a coding agent. ") // 2
    assert isinstance(httpx, object)


async def test_running_rows_decode_while_a_long_prompt_prefills(model_dir: Path) -> None:
    """A long prompt prefills one chunk per step: the running generation keeps producing
    tokens in between, and the long prompt's logprobs are those of a one-chunk prefill."""
    from clawrl.proxy.backends.base import TokenDelta

    long_prompt = turn(b"x" * 400)
    plain = EmbeddedBackend(model_dir, seed=0, prefix_cache_bytes=0)
    want = await run(plain, "ref", long_prompt, max_tokens=2)
    await plain.close()
    be = EmbeddedBackend(model_dir, seed=0, prefix_cache_bytes=0, prefill_chunk=32)
    try:
        running = be.generate(
            GenerationRequest("run", turn(b"hi"), SamplingParams(max_tokens=300, temperature=1.0))
        )
        await anext(running)
        order: list[str] = []

        async def drain() -> None:
            async for item in running:
                if isinstance(item, TokenDelta):
                    order.append("run")

        drainer = asyncio.create_task(drain())
        got: GenerationResult | None = None
        order.append("submit")
        async for item in be.generate(
            GenerationRequest("long", long_prompt, SamplingParams(max_tokens=2, temperature=0.0))
        ):
            if isinstance(item, TokenDelta) and "long" not in order:
                order.append("long")
            if isinstance(item, GenerationResult):
                got = item
        await be.abort("run")
        await drainer
    finally:
        await be.close()
    # about one decoded token per prefill chunk (len(long_prompt) / 32 = 14 chunks)
    between = order[order.index("submit") : order.index("long")]
    assert between.count("run") >= 8, order[:30]
    assert got is not None and got.completion_ids == want.completion_ids
    diffs = [
        abs(a - b) for a, b in zip(got.completion_logprobs, want.completion_logprobs, strict=True)
    ]
    assert max(diffs) < 1e-4


# --------------------------------------------------------------------------- KV appends


def test_cache_layers_append_in_place_and_grow() -> None:
    """The running batch's cache appends a decoded token by writing into spare room, not by
    concatenating the whole cache: the keys stay views of one buffer until it is full, then
    it grows by a quarter (at least 256 columns); the values always equal plain
    concatenation, and a layer whose keys were replaced (a merge, a row dropped) starts a new
    buffer from them. Revert tried: ``growing`` returning the cache unchanged — a new buffer
    on every append (data pointer changes)."""
    from clawrl.proxy.backends.embedded_kv import _cache_from, growing

    g = torch.Generator().manual_seed(0)
    k0, v0 = torch.randn(2, 2, 40, 8, generator=g), torch.randn(2, 2, 40, 8, generator=g)
    cache = growing(growing(_cache_from([k0.clone()], [v0.clone()])))  # twice: a no-op
    want_k, want_v = k0, v0
    ptrs = []
    for step in range(300):
        n = 3 if step == 0 else 1  # a prefill chunk, then decoding
        k, v = torch.randn(2, 2, n, 8, generator=g), torch.randn(2, 2, n, 8, generator=g)
        got_k, got_v = cache.update(k, v, 0)
        want_k, want_v = torch.cat([want_k, k], 2), torch.cat([want_v, v], 2)
        assert torch.equal(got_k, want_k) and torch.equal(got_v, want_v)
        ptrs.append(got_k.data_ptr())
    assert cache.get_seq_length() == 40 + 3 + 299
    # one buffer of 43 + 256 columns, full at the 257th append, then a larger one
    assert len(set(ptrs)) == 2, len(set(ptrs))
    layer = cache.layers[0]
    layer.keys, layer.values = layer.keys[:1].clone(), layer.values[:1].clone()  # a row dropped
    k, v = torch.randn(1, 2, 1, 8, generator=g), torch.randn(1, 2, 1, 8, generator=g)
    got_k, _ = cache.update(k, v, 0)
    assert torch.equal(got_k, torch.cat([want_k[:1], k], 2))


@pytest.mark.parametrize("in_place", [True, False], ids=["in-place", "concatenate"])
async def test_long_decode_with_rows_joining_matches_a_full_forward(
    model_dir: Path, in_place: bool
) -> None:
    """Decoding past the cache's spare room (300 tokens) while other rows join and leave
    gives the logprobs of one full forward over prompt + completion (fp32), with in-place
    appends and with transformers' concatenation."""
    be = EmbeddedBackend(model_dir, seed=0, prefix_cache_bytes=0, kv_in_place=in_place)
    try:
        await be.start()
        first = asyncio.create_task(
            run(be, "long", turn(b"a long answer please"), max_tokens=300, temperature=1.0)
        )
        await asyncio.sleep(0.3)
        others = [
            await run(be, f"o{i}", turn(b"short %d" % i), max_tokens=8, temperature=1.0)
            for i in range(2)
        ]
        long = await first
        for prompt, r in [(turn(b"a long answer please"), long)] + [
            (turn(b"short %d" % i), o) for i, o in enumerate(others)
        ]:
            got = torch.tensor(r.completion_logprobs)
            want = torch.tensor(recompute(be.model, prompt, list(r.completion_ids), 1.0))
            assert (got - want).abs().max() < 1e-4, (got - want).abs().max()
        assert len(long.completion_ids) == 300 or long.finish_reason == "stop"
    finally:
        await be.close()


def test_growing_cache_is_freed_without_the_cycle_collector() -> None:
    """A converted cache holds no reference cycle: dropping it frees its layers (and their
    buffers) at once. Found under a real mix-harness evaluation: a closure on each layer
    kept every batch's buffers alive until the cyclic collector ran, and the process was
    killed for memory at 22 GB."""
    import gc
    import weakref

    from clawrl.proxy.backends.embedded_kv import _cache_from, growing

    gc.disable()
    try:
        k = torch.zeros(1, 2, 4, 8)
        cache = growing(_cache_from([k.clone()], [k.clone()]))
        cache.update(torch.ones(1, 2, 1, 8), torch.ones(1, 2, 1, 8), 0)
        ref = weakref.ref(cache.layers[0])
        del cache
        assert ref() is None
    finally:
        gc.enable()
