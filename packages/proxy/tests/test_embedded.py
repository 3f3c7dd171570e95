"""EmbeddedBackend behaviour: stop/length, validation, abort, pause, weights, responsiveness."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import torch
from clawrl.proxy.backends.base import (
    BackendError,
    GenerationRequest,
    GenerationResult,
    SamplingParams,
    TokenDelta,
)
from clawrl.proxy.backends.embedded import (
    EmbeddedBackend,
    EmbeddedRequestError,
    PromptTooLongError,
    WeightLoadError,
    sample_token,
)
from clawrl.proxy.model_kit import build_default_model
from hypothesis import given, settings
from hypothesis import strategies as st

PROMPT = [256 + 1, *b"user\nhello", 256 + 2, 10, 256 + 1, *b"assistant\n"]


@pytest.fixture(scope="module")
def byte_dir() -> Path:
    return build_default_model("byte")


@pytest.fixture(scope="module")
def other_dir(byte_dir: Path) -> Path:
    """Same architecture, other weights (seed 1)."""
    return build_default_model("byte", cache_dir=byte_dir.parent, seed=1)


@pytest.fixture
async def backend(byte_dir: Path) -> AsyncIterator[EmbeddedBackend]:
    # no prefix cache: reused KV differs from recomputed KV in the last bits, and several
    # tests compare logprobs bit for bit
    be = EmbeddedBackend(byte_dir, seed=0, max_context=512, prefix_cache_bytes=0)
    await be.start()
    yield be
    await be.close()


def req(rid: str, prompt: list[int] | None = None, **sampling: Any) -> GenerationRequest:
    sampling.setdefault("max_tokens", 8)
    return GenerationRequest(
        rid, list(PROMPT if prompt is None else prompt), SamplingParams(**sampling)
    )


async def collect(
    be: EmbeddedBackend, request: GenerationRequest
) -> tuple[list[TokenDelta], GenerationResult]:
    deltas: list[TokenDelta] = []
    async for item in be.generate(request):
        if isinstance(item, TokenDelta):
            deltas.append(item)
        else:
            return deltas, item
    raise AssertionError("no GenerationResult")


async def test_length_stop_and_streaming(backend: EmbeddedBackend) -> None:
    deltas, result = await collect(backend, req("a", max_tokens=6, temperature=0.0))
    assert result.finish_reason == "length"
    assert len(result.completion_ids) == 6
    assert [t for d in deltas for t in d.token_ids] == result.completion_ids
    assert [lp for d in deltas for lp in d.logprobs] == result.completion_logprobs
    assert all(lp <= 0 for lp in result.completion_logprobs)
    assert result.policy_version == result.policy_version_end == 0
    # the 4th greedy token as a stop token: generation ends there, stop token included
    stop = result.completion_ids[3]
    first = result.completion_ids.index(stop)
    _, stopped = await collect(
        backend, req("b", max_tokens=6, temperature=0.0, stop_token_ids=(stop,))
    )
    assert stopped.finish_reason == "stop"
    assert stopped.completion_ids == result.completion_ids[: first + 1]


async def test_seeded_sampling_is_reproducible(backend: EmbeddedBackend) -> None:
    a = (await collect(backend, req("a", max_tokens=12, seed=42)))[1]
    # (the fixture's backend has no prefix cache: a reused KV prefix may change last bits)
    b = (await collect(backend, req("b", max_tokens=12, seed=42)))[1]
    c = (await collect(backend, req("c", max_tokens=12, seed=43)))[1]
    assert a.completion_ids == b.completion_ids
    assert a.completion_logprobs == b.completion_logprobs
    assert a.completion_ids != c.completion_ids


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        (req("e", prompt=[]), EmbeddedRequestError),
        (req("e", prompt=[1, 282]), EmbeddedRequestError),
        (req("e", prompt=[-1]), EmbeddedRequestError),
        (req("e", max_tokens=0), EmbeddedRequestError),
        (req("e", prompt=[1] * 500, max_tokens=13), PromptTooLongError),
        (req("e", temperature=-1.0), EmbeddedRequestError),
        (req("e", temperature=float("nan")), EmbeddedRequestError),
        (req("e", top_p=0.0), EmbeddedRequestError),
        (req("e", top_k=0), EmbeddedRequestError),
        (req("e", stop_token_ids=(999,)), EmbeddedRequestError),
    ],
)
async def test_invalid_requests_raise_typed_errors(
    backend: EmbeddedBackend, request_: GenerationRequest, error: type[Exception]
) -> None:
    with pytest.raises(error):
        await collect(backend, request_)
    assert issubclass(error, BackendError)
    # the backend still serves
    _, result = await collect(backend, req("ok", max_tokens=2))
    assert len(result.completion_ids) == 2


async def test_prompt_exactly_filling_context_is_accepted(backend: EmbeddedBackend) -> None:
    _, result = await collect(backend, req("full", prompt=[5] * 510, max_tokens=2))
    assert result.finish_reason == "length" and len(result.completion_ids) == 2


async def test_duplicate_request_id_rejected(backend: EmbeddedBackend) -> None:
    gen = backend.generate(req("dup", max_tokens=200))
    first = await gen.__anext__()
    assert isinstance(first, TokenDelta)
    with pytest.raises(EmbeddedRequestError):
        await collect(backend, req("dup"))
    await gen.aclose()


async def test_abort_running_and_waiting(byte_dir: Path) -> None:
    be = EmbeddedBackend(byte_dir, seed=0, max_batch_size=1)
    try:
        running = be.generate(req("run", max_tokens=400))
        assert isinstance(await running.__anext__(), TokenDelta)
        waiting = asyncio.ensure_future(collect(be, req("wait", max_tokens=400)))
        await asyncio.sleep(0.05)
        await be.abort("wait")  # still queued behind "run" (one batch slot)
        _, waited = await waiting
        assert waited.finish_reason == "aborted" and waited.completion_ids == []
        await be.abort("run")
        items = [item async for item in running]
        result = items[-1]
        assert isinstance(result, GenerationResult)
        assert result.finish_reason == "aborted"
        assert 1 <= len(result.completion_ids) < 400
        assert len(result.completion_logprobs) == len(result.completion_ids)
        await be.abort("unknown-id")  # no-op
    finally:
        await be.close()


async def test_closing_the_stream_aborts_the_generation(backend: EmbeddedBackend) -> None:
    gen = backend.generate(req("gone", max_tokens=400))
    await gen.__anext__()
    await gen.aclose()
    for _ in range(100):
        if not backend._inflight:
            break
        await asyncio.sleep(0.01)
    assert not backend._inflight
    tokens_before = backend.stats["tokens"]
    await asyncio.sleep(0.1)
    assert backend.stats["tokens"] - tokens_before <= 1


async def test_pause_holds_new_generations_until_resume(backend: EmbeddedBackend) -> None:
    running = asyncio.ensure_future(collect(backend, req("run", max_tokens=60)))
    await asyncio.sleep(0.05)
    await backend.pause()
    assert backend.paused
    held = asyncio.ensure_future(collect(backend, req("held", max_tokens=4)))
    _, done = await running  # in-flight generation finishes while paused
    assert done.finish_reason == "length" and len(done.completion_ids) == 60
    await asyncio.sleep(0.2)
    assert not held.done()
    await backend.resume()
    _, result = await asyncio.wait_for(held, 10)
    assert len(result.completion_ids) == 4


async def _logprobs_of(be: EmbeddedBackend, rid: str) -> GenerationResult:
    return (await collect(be, req(rid, max_tokens=10, temperature=0.0)))[1]


async def test_update_weights_changes_logprobs_and_restores_bit_identically(
    backend: EmbeddedBackend, byte_dir: Path, other_dir: Path
) -> None:
    before = await _logprobs_of(backend, "w0")
    await backend.update_weights(str(other_dir), 1)
    assert backend.policy_version == 1
    other = await _logprobs_of(backend, "w1")
    assert other.policy_version == other.policy_version_end == 1
    assert other.completion_logprobs != before.completion_logprobs
    await backend.update_weights(str(byte_dir), 2)
    again = await _logprobs_of(backend, "w2")
    assert again.policy_version == 2
    assert again.completion_ids == before.completion_ids
    assert again.completion_logprobs == before.completion_logprobs  # bit-identical


async def test_load_state_dict_in_process(
    backend: EmbeddedBackend, byte_dir: Path, other_dir: Path
) -> None:
    from transformers import AutoModelForCausalLM

    before = await _logprobs_of(backend, "s0")
    trainer_model = AutoModelForCausalLM.from_pretrained(str(other_dir), dtype=torch.float32)
    await backend.load_state_dict(trainer_model.state_dict(), 7)
    assert backend.policy_version == 7
    changed = await _logprobs_of(backend, "s1")
    assert changed.completion_logprobs != before.completion_logprobs
    # the backend copied the tensors: changing the trainer's weights afterwards has no effect
    with torch.no_grad():
        for p in trainer_model.parameters():
            p.add_(1.0)
    assert (await _logprobs_of(backend, "s2")).completion_logprobs == changed.completion_logprobs
    original = AutoModelForCausalLM.from_pretrained(str(byte_dir), dtype=torch.float32)
    await backend.load_state_dict(original.state_dict(), 8)
    assert (await _logprobs_of(backend, "s3")).completion_logprobs == before.completion_logprobs


async def test_weights_changed_mid_generation_report_policy_version_end(
    backend: EmbeddedBackend, other_dir: Path
) -> None:
    gen = backend.generate(req("mid", max_tokens=300))
    await gen.__anext__()
    await backend.update_weights(str(other_dir), 5)
    items = [item async for item in gen]
    result = items[-1]
    assert isinstance(result, GenerationResult)
    assert result.policy_version == 0
    assert result.policy_version_end == 5


async def test_bad_weights_raise_and_keep_previous(
    backend: EmbeddedBackend, tmp_path: Path, byte_dir: Path
) -> None:
    before = await _logprobs_of(backend, "b0")
    with pytest.raises(WeightLoadError):
        await backend.update_weights(str(tmp_path / "missing"), 1)
    with pytest.raises(WeightLoadError):
        await backend.update_weights(str(tmp_path), 1)  # no safetensors files
    small = build_default_model(
        "byte", cache_dir=byte_dir.parent, hidden_size=64, intermediate_size=128
    )
    with pytest.raises(WeightLoadError, match="shape mismatch"):
        await backend.update_weights(str(small), 1)
    with pytest.raises(WeightLoadError, match="unknown keys"):
        await backend.load_state_dict({"not.a.weight": torch.zeros(1)}, 1)
    assert backend.policy_version == 0
    assert (await _logprobs_of(backend, "b1")).completion_logprobs == before.completion_logprobs


async def test_event_loop_stays_responsive_during_prefill(byte_dir: Path) -> None:
    be = EmbeddedBackend(byte_dir, seed=0, prefill_chunk=4096)
    await be.start()
    gaps: list[float] = []

    async def ticker() -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    tick = asyncio.ensure_future(ticker())
    t0 = time.perf_counter()
    try:
        # one prefill forward over the whole prompt: ~1-2 s on 2 cores
        _, result = await collect(be, req("long", prompt=[7] * 4000, max_tokens=4))
    finally:
        tick.cancel()
        await be.close()
    took = time.perf_counter() - t0
    assert len(result.completion_ids) == 4
    assert len(gaps) > 10
    # were the forward run on the event loop, one gap would last the whole prefill
    assert max(gaps) < max(0.3, took / 3), (max(gaps), took)


async def test_not_a_model_directory(tmp_path: Path) -> None:
    with pytest.raises(BackendError):
        EmbeddedBackend(tmp_path)


async def test_properties(byte_dir: Path) -> None:
    be = EmbeddedBackend(byte_dir)
    assert be.vocab_size == 282
    assert be.max_context == 40960
    assert be.policy_version == 0
    assert not await be.health()
    with pytest.raises(ValueError):
        EmbeddedBackend(byte_dir, max_context=50000)


def test_sample_token_greedy_and_truncation() -> None:
    logits = torch.tensor([0.0, 3.0, 1.0, 2.0])
    token, lp = sample_token(logits, SamplingParams(max_tokens=1, temperature=0.0), None)
    assert token == 1
    assert lp == pytest.approx(torch.log_softmax(logits, -1)[1].item())
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        token, lp = sample_token(logits, SamplingParams(max_tokens=1, top_k=2), gen)
        assert token in (1, 3)
        assert lp == pytest.approx(
            torch.log_softmax(torch.tensor([3.0, 2.0]), -1)[0 if token == 1 else 1].item()
        )
        token, lp = sample_token(logits, SamplingParams(max_tokens=1, top_p=0.5), gen)
        assert token == 1 and lp == pytest.approx(0.0)


async def test_model_that_cannot_load_raises_backend_error(tmp_path: Path, byte_dir: Path) -> None:
    (tmp_path / "config.json").write_text((byte_dir / "config.json").read_text())
    be = EmbeddedBackend(tmp_path)  # config but no weights
    with pytest.raises(BackendError, match="cannot load model"):
        await be.start()
    assert not await be.health()


async def test_failing_step_ends_requests_with_error_and_backend_recovers(
    backend: EmbeddedBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = backend._forward
    calls = {"n": 0}

    def flaky(*args: Any) -> torch.Tensor:
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("simulated kernel failure")
        return real(*args)

    monkeypatch.setattr(backend, "_forward", flaky)
    _, failed = await collect(backend, req("f", max_tokens=10))
    assert failed.finish_reason == "error"
    assert failed.error is not None and "simulated kernel failure" in failed.error
    assert len(failed.completion_ids) == len(failed.completion_logprobs) == 2
    _, ok = await collect(backend, req("g", max_tokens=10))
    assert ok.finish_reason == "length" and len(ok.completion_ids) == 10


async def test_long_prompts_are_admitted_in_bounded_groups(byte_dir: Path) -> None:
    be = EmbeddedBackend(byte_dir, seed=0, max_prefill_tokens=300, prefix_cache_bytes=0)
    try:
        results = await asyncio.gather(
            *(collect(be, req(f"g{i}", prompt=[9] * 200, max_tokens=3)) for i in range(3))
        )
    finally:
        await be.close()
    assert be.stats["prefills"] == 3  # 2 x 200 > 300: one prompt per prefill
    assert all(r.finish_reason == "length" for _, r in results)
    # with the prefix cache only the tokens still to compute count: the first prompt is
    # prefilled alone, the other two reuse its KV (199 tokens each) and are admitted together
    be = EmbeddedBackend(byte_dir, seed=0, max_prefill_tokens=300)
    try:
        await asyncio.gather(
            *(collect(be, req(f"g{i}", prompt=[9] * 200, max_tokens=3)) for i in range(3))
        )
    finally:
        await be.close()
    assert be.stats["prefills"] == 2
    assert be.stats["prefix_hit_tokens"] == 2 * 199


def test_sampling_frequencies_follow_the_distribution() -> None:
    """Inverse-CDF sampling: empirical frequencies match softmax(logits / T); tokens outside
    the top-k set are never drawn."""
    logits = torch.tensor([1.0, 0.0, -1.0, 2.0, float("-inf"), 0.5])
    gen = torch.Generator().manual_seed(123)
    n = 20000
    sp = SamplingParams(max_tokens=1, temperature=0.8)
    counts = torch.zeros(6)
    for _ in range(n):
        counts[sample_token(logits, sp, gen)[0]] += 1
    expected = torch.softmax(logits / 0.8, -1)
    assert counts[4] == 0
    # 5 sigma of a binomial proportion
    sigma = (expected * (1 - expected) / n).sqrt()
    assert ((counts / n - expected).abs() <= 5 * sigma + 1e-9).all(), (counts / n, expected)
    top2 = SamplingParams(max_tokens=1, top_k=2)
    drawn = {sample_token(logits, top2, gen)[0] for _ in range(500)}
    assert drawn == {0, 3}


async def test_prefix_cache_reuses_and_evicts_lru(byte_dir: Path) -> None:
    per_token = 2 * 2 * 2 * 32 * 4  # layers x (K, V) x kv heads x head_dim x float32
    be = EmbeddedBackend(byte_dir, seed=0, prefix_cache_bytes=100 * per_token)
    a = list(range(1, 61))
    b = list(range(100, 160))
    try:
        _, ra = await collect(be, req("a", prompt=a, max_tokens=4))
        _, rb = await collect(be, req("b", prompt=b, max_tokens=4))  # evicts a (2 x 63 > 100)
        assert be.stats["prefix_hit_tokens"] == 0
        await collect(be, req("b2", prompt=[*b, *rb.completion_ids, 7], max_tokens=4))
        assert be.stats["prefix_hit_tokens"] == 63  # b's prompt + 3 fed completion tokens
        await collect(be, req("a2", prompt=[*a, *ra.completion_ids, 7], max_tokens=4))
        assert be.stats["prefix_hit_tokens"] == 63  # a was evicted
        # same prompt again: all but its last token reused
        await collect(be, req("a3", prompt=[*a, *ra.completion_ids, 7], max_tokens=4))
        assert be.stats["prefix_hit_tokens"] == 63 + 64
    finally:
        await be.close()


@settings(max_examples=200, deadline=None)
@given(
    logits=st.lists(st.floats(-20, 20), min_size=1, max_size=40),
    top_p=st.floats(0.01, 1.0),
    top_k=st.integers(-1, 45).filter(lambda k: k != 0),
)
def test_truncation_keeps_the_minimal_nucleus(
    logits: list[float], top_p: float, top_k: int
) -> None:
    from clawrl.proxy.backends.embedded import _truncate

    x = torch.tensor(logits)
    kept = torch.isfinite(_truncate(x, top_k, top_p))
    assert kept.any()
    # the argmax always survives
    assert kept[int(torch.argmax(x))]
    after_k = (
        x
        if top_k < 1 or top_k >= len(logits)
        else x.masked_fill(x < torch.topk(x, top_k).values[-1], float("-inf"))
    )
    probs = torch.softmax(after_k, -1)
    mass = probs[kept].sum().item()
    if top_p < 1.0:
        # enough mass, and dropping the least likely kept token would leave too little
        assert mass >= top_p - 1e-5 or kept.sum() == torch.isfinite(after_k).sum()
        smallest = probs[kept].min().item()
        assert mass - smallest < top_p + 1e-5 or kept.sum() == 1
    # kept tokens are the most likely ones: every kept logit >= every dropped logit
    if (~kept).any():
        assert x[kept].min() >= x[~kept].max()
