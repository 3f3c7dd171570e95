"""Reproducible sampling: a session created with ``sampling_seed`` draws each call
from ``call_seed(sampling_seed, seq)``, so its completions do not depend on the order in which
concurrent sessions' requests arrive or on what else is batched with them (embedded backend,
the kit's tiny byte model, live proxy, official openai SDK)."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from clawrl.proxy import call_seed


@pytest.fixture(scope="module")
def live(renderer: Any, model_dir: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    import torch
    from clawrl.proxy import EmbeddedBackend

    from .conftest import serve_live

    torch.set_num_threads(1)
    backend = EmbeddedBackend(model_dir, seed=0, max_batch_size=8)
    with serve_live(renderer, backend, tmp_path_factory.mktemp("cap"), "clawrl-seed-") as proxy:
        yield proxy


def _conversation(live: Any, seed: int | None, prompt: str, calls: int = 2) -> list[list[int]]:
    """``calls`` chat calls of one session; the completion ids of each, from the records."""
    with live.admin() as admin:
        s = admin.create_session(run_id="seeded", sampling_seed=seed)
        client = openai.OpenAI(
            base_url=s.openai_base_url, api_key=s.api_key, http_client=live.http_client()
        )
        messages: list[Any] = [{"role": "user", "content": prompt}]
        for _ in range(calls):
            r = client.chat.completions.create(
                model="tiny", messages=messages, max_tokens=24, temperature=1.0
            )
            messages += [
                {"role": "assistant", "content": r.choices[0].message.content or ""},
                {"role": "user", "content": "go on"},
            ]
        records = admin.records(s.session_id)
    if seed is not None:
        assert [r["sampling"]["seed"] for r in records] == [
            call_seed(seed, i) for i in range(calls)
        ]
        assert {r["sampling"]["seed_source"] for r in records} == {"session"}
    return [r["completion_ids"] for r in records]


def test_call_seed_is_a_pure_function_of_session_seed_and_seq() -> None:
    assert call_seed(7, 0) == call_seed(7, 0)
    seeds = {call_seed(s, q) for s in range(20) for q in range(20)}
    assert len(seeds) == 400 and all(0 <= x < 2**63 for x in seeds)


def test_a_seeded_session_draws_the_same_alone_and_under_concurrent_load(live: Any) -> None:
    """Revert tried: the proxy ignoring ``sampling_seed`` (the embedded backend's generator
    in arrival order) -> the loaded run's completions differ from the lone run's."""
    alone = _conversation(live, 1234, "hello")
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        noise = [pool.submit(_conversation, live, None, f"noise {i}", 3) for i in range(5)]
        loaded = pool.submit(_conversation, live, 1234, "hello")
        for f in noise:
            f.result()
        assert loaded.result() == alone
    assert _conversation(live, 1235, "hello") != alone  # another seed, another stream


def test_sampling_seed_is_validated(live: Any) -> None:
    import httpx

    client = httpx.Client(transport=httpx.HTTPTransport(uds=live.config.admin_socket))
    with client:
        for bad in ("1", 1.5, 2**63, True):
            r = client.post("http://a/sessions", json={"sampling_seed": bad})
            assert r.status_code == 400, (bad, r.text)
            assert r.json()["error"]["param"] == "sampling_seed"
