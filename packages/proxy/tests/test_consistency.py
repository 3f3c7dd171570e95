"""Engine/trainer logprob consistency of the embedded backend (float32).

The oracle ("trainer recompute") is a plain full forward of the model over
prompt + completion, one sequence at a time, no cache, no padding:
``log_softmax(logits / T)[token]`` at the applied temperature T (docs/architecture.md, "Logprobs").
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest
import torch
from clawrl.proxy.backends.base import (
    GenerationRequest,
    GenerationResult,
    SamplingParams,
    TokenDelta,
)
from clawrl.proxy.backends.embedded import EmbeddedBackend
from clawrl.proxy.model_kit import build_default_model

TOL = 1e-5


@pytest.fixture(scope="module")
def byte_dir() -> Path:
    return build_default_model("byte")


@pytest.fixture(scope="module")
def reference_model(byte_dir: Path) -> Any:
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(str(byte_dir), dtype=torch.float32)
    model.eval()
    return model


def recompute(
    model: Any, prompt: list[int], completion: list[int], sampling: SamplingParams
) -> torch.Tensor:
    """Trainer-side logprobs of ``completion`` (one full forward, float32)."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    temperature = sampling.temperature if sampling.temperature > 0 else 1.0
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(1, torch.tensor(completion)[:, None])[:, 0]


async def run_request(
    backend: EmbeddedBackend, request: GenerationRequest, delay: float = 0.0
) -> tuple[GenerationRequest, GenerationResult, list[int]]:
    if delay:
        await asyncio.sleep(delay)
    streamed: list[int] = []
    result: GenerationResult | None = None
    async for item in backend.generate(request):
        if isinstance(item, TokenDelta):
            streamed.extend(item.token_ids)
        else:
            result = item
    assert result is not None
    return request, result, streamed


async def test_concurrent_batched_requests_match_full_forward(
    reference_model: Any, byte_dir: Path
) -> None:
    """Requests of different lengths and temperatures, arriving while others decode, with
    fewer batch slots than requests (rows join and leave the padded batch), and prompts longer
    than one prefill chunk: every generated token's logprob equals the recompute."""
    rng = random.Random(1)
    backend = EmbeddedBackend(byte_dir, max_batch_size=4, prefill_chunk=48, seed=3)
    temperatures = [1.0, 0.7, 1.3, 0.0, 1.0, 0.5, 1.0, 2.0, 1.0, 0.9]
    lengths = [1, 7, 130, 33, 2, 64, 150, 12, 90, 5]
    requests = [
        GenerationRequest(
            request_id=f"r{i}",
            prompt_ids=[rng.randrange(282) for _ in range(n)],
            sampling=SamplingParams(max_tokens=rng.randint(3, 40), temperature=t),
        )
        for i, (n, t) in enumerate(zip(lengths, temperatures, strict=True))
    ]
    delays = [0.0, 0.0, 0.0, 0.02, 0.05, 0.05, 0.1, 0.15, 0.2, 0.25]
    try:
        outs = await asyncio.gather(
            *(run_request(backend, r, d) for r, d in zip(requests, delays, strict=True))
        )
    finally:
        await backend.close()
    assert backend.stats["prefills"] >= 3  # rows joined a running batch several times
    assert backend.stats["max_running"] >= 3
    worst = 0.0
    for request, result, streamed in outs:
        assert result.finish_reason == "length"
        assert len(result.completion_ids) == request.sampling.max_tokens
        assert streamed == result.completion_ids
        expected = recompute(
            reference_model, request.prompt_ids, result.completion_ids, request.sampling
        )
        got = torch.tensor(result.completion_logprobs)
        diff = (got - expected).abs().max().item()
        worst = max(worst, diff)
        assert diff <= TOL, (request.request_id, diff)
        if request.sampling.temperature == 0:
            # greedy: each token is the argmax of the recomputed distribution
            ids = torch.tensor([request.prompt_ids + result.completion_ids])
            with torch.no_grad():
                logits = reference_model(ids).logits[0, len(request.prompt_ids) - 1 : -1]
            assert logits.argmax(-1).tolist() == result.completion_ids
    print(f"max |engine - recompute| = {worst:.2e}")


async def test_truncated_sampling_records_renormalised_logprob(
    reference_model: Any, byte_dir: Path
) -> None:
    """With top_p < 1 / top_k the recorded logprob is that of the truncated, renormalised
    distribution (and sampled tokens always lie inside the kept set)."""
    from clawrl.proxy.backends.embedded import _truncate

    backend = EmbeddedBackend(byte_dir, seed=0)
    prompt = list(range(40, 80))
    try:
        outs = await asyncio.gather(
            run_request(
                backend,
                GenerationRequest(
                    "p", prompt, SamplingParams(max_tokens=25, temperature=1.0, top_p=0.3)
                ),
            ),
            run_request(
                backend,
                GenerationRequest(
                    "k", prompt[:9], SamplingParams(max_tokens=25, temperature=0.8, top_k=5)
                ),
            ),
        )
    finally:
        await backend.close()
    for request, result, _ in outs:
        sp = request.sampling
        ids = torch.tensor([request.prompt_ids + result.completion_ids])
        with torch.no_grad():
            logits = reference_model(ids).logits[0, len(request.prompt_ids) - 1 : -1].float()
        for row, (token, lp) in enumerate(
            zip(result.completion_ids, result.completion_logprobs, strict=True)
        ):
            truncated = _truncate(logits[row] / sp.temperature, sp.top_k, sp.top_p)
            logp = torch.log_softmax(truncated, -1)
            assert torch.isfinite(logp[token])
            assert abs(logp[token].item() - lp) <= TOL
            # the plain (untruncated) logprob is lower: mass was renormalised
            assert lp >= torch.log_softmax(logits[row] / sp.temperature, -1)[token].item() - TOL


@pytest.mark.slow
async def test_qwen3_vocabulary_model_matches_full_forward(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The real-vocabulary (151,669 ids) model: batched requests still match."""
    from transformers import AutoModelForCausalLM

    model_dir = build_default_model("qwen3")
    reference = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    backend = EmbeddedBackend(model_dir, max_batch_size=3, seed=5)
    rng = random.Random(2)
    requests = [
        GenerationRequest(
            f"q{i}",
            [rng.randrange(151669) for _ in range(n)],
            SamplingParams(max_tokens=12, temperature=t),
        )
        for i, (n, t) in enumerate([(3, 1.0), (50, 0.6), (20, 1.0), (8, 0.0)])
    ]
    try:
        outs = await asyncio.gather(
            *(run_request(backend, r, 0.01 * i) for i, r in enumerate(requests))
        )
    finally:
        await backend.close()
    for request, result, _ in outs:
        expected = recompute(reference, request.prompt_ids, result.completion_ids, request.sampling)
        diff = (torch.tensor(result.completion_logprobs) - expected).abs().max().item()
        assert diff <= TOL, (request.request_id, diff)


async def test_prefix_cache_reuse_matches_full_forward(
    reference_model: Any, byte_dir: Path
) -> None:
    """Multi-turn conversations: each call's prompt extends the previous call's prompt +
    completion, so its prefix KV is reused; two conversations run concurrently with a
    no-hit request (rows with different reused lengths share one padded prefill). Every
    token still matches the full forward."""
    rng = random.Random(7)
    backend = EmbeddedBackend(byte_dir, seed=11, prefill_chunk=32)
    system = [rng.randrange(256) for _ in range(60)]
    histories = {"a": [*system, 1, 2, 3], "b": [*system, 4, 5]}
    checked = 0
    try:
        for turn in range(3):
            requests = [
                GenerationRequest(
                    f"{name}{turn}",
                    list(history),
                    SamplingParams(
                        max_tokens=10 + 3 * turn, temperature=0.9, stop_token_ids=(258,)
                    ),
                )
                for name, history in histories.items()
            ]
            requests.append(
                GenerationRequest(
                    f"fresh{turn}",
                    [rng.randrange(256) for _ in range(rng.randint(2, 40))],
                    SamplingParams(max_tokens=5),
                )
            )
            outs = await asyncio.gather(*(run_request(backend, r) for r in requests))
            for request, result, _ in outs:
                expected = recompute(
                    reference_model, request.prompt_ids, result.completion_ids, request.sampling
                )
                diff = (torch.tensor(result.completion_logprobs) - expected).abs().max().item()
                assert diff <= TOL, (request.request_id, diff)
                checked += len(result.completion_ids)
                name = request.request_id[:-1]
                if name in histories:  # the harness appends the answer and a new user turn
                    tool_result = [rng.randrange(256) for _ in range(rng.randint(1, 50))]
                    histories[name] = request.prompt_ids + result.completion_ids + tool_result
    finally:
        await backend.close()
    # turns 1 and 2 of both conversations reused at least the previous prompt
    assert backend.stats["prefix_hit_tokens"] >= 4 * 60
    assert checked > 50


async def test_prefix_cache_is_dropped_on_weight_change(
    reference_model: Any, byte_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from transformers import AutoModelForCausalLM

    other = build_default_model("byte", cache_dir=byte_dir.parent, seed=1)
    backend = EmbeddedBackend(byte_dir, seed=0)
    prompt = list(range(30, 90))
    try:
        _, first, _ = await run_request(
            backend, GenerationRequest("x", prompt, SamplingParams(max_tokens=8))
        )
        follow = prompt + first.completion_ids + [5, 6, 7]
        await backend.update_weights(str(other), 1)
        hits = backend.stats["prefix_hit_tokens"]
        request = GenerationRequest("y", follow, SamplingParams(max_tokens=8))
        _, second, _ = await run_request(backend, request)
        assert backend.stats["prefix_hit_tokens"] == hits  # nothing reused across versions
    finally:
        await backend.close()
    new_model = AutoModelForCausalLM.from_pretrained(str(other), dtype=torch.float32)
    expected = recompute(new_model, follow, second.completion_ids, request.sampling)
    assert (torch.tensor(second.completion_logprobs) - expected).abs().max().item() <= TOL
