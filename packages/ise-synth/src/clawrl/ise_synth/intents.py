"""Stage 1 end to end: sample specs → render intents → dedup → Vendi Score.

:func:`generate_intents` renders draws ``0 … n−1`` of a seeded :class:`IntentSampler`, with the
template renderer or concurrently through an :class:`LLMRenderer`, appending each record to a
raw JSONL file as soon as it exists (so an interrupted run resumes where it stopped: draws
already in the raw file with the same seed and renderer are not rendered again).
:func:`dedup_intents` then removes exact duplicates (normalised text) and near-duplicates
(embedding cosine ≥ threshold within each primary domain, greedy) and computes the Vendi Score of
the unique pool with the same embeddings; :class:`IntentStats` records the embedding used.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson
from clawrl.ise_synth.dedup import dedup_exact, dedup_near
from clawrl.ise_synth.embeddings import Embedder
from clawrl.ise_synth.errors import RenderError
from clawrl.ise_synth.records import IntentRecord, read_intents
from clawrl.ise_synth.render import LLMRenderer, TemplateRenderer
from clawrl.ise_synth.sampling import IntentSampler
from clawrl.ise_synth.vendi import vendi_score

__all__ = ["IntentStats", "dedup_intents", "generate_intents"]

Progress = Callable[[int], None]


def _load_raw(raw_path: Path | None, seed: int, renderer: str) -> dict[int, IntentRecord]:
    if raw_path is None or not raw_path.exists():
        return {}
    return {r.index: r for r in read_intents(raw_path) if r.seed == seed and r.renderer == renderer}


def generate_intents(
    sampler: IntentSampler,
    n: int,
    renderer: TemplateRenderer | LLMRenderer,
    raw_path: Path | None = None,
    concurrency: int = 8,
    progress: Progress | None = None,
) -> tuple[list[IntentRecord], int]:
    """Render draws ``0 … n−1``; returns (records in draw order, number of render failures).

    Records are appended to ``raw_path`` (JSONL, flushed per record) when given; draws already
    there (same seed and renderer name) are reused. With an LLM renderer up to ``concurrency``
    requests run at once; a draw whose rendering raises RenderError is counted and left out
    (re-running retries it).
    """
    done = _load_raw(raw_path, sampler.seed, renderer.name)
    todo = [i for i in range(n) if i not in done]
    if progress and done:
        progress(n - len(todo))
    fh = raw_path.open("ab") if raw_path is not None else None

    def emit(rec: IntentRecord) -> None:
        done[rec.index] = rec
        if fh is not None:
            fh.write(orjson.dumps(rec.to_dict()) + b"\n")
            fh.flush()
        if progress:
            progress(1)

    failures = 0
    try:
        if isinstance(renderer, TemplateRenderer):
            for i in todo:
                spec = sampler.draw(i)
                emit(IntentRecord.from_spec(spec, renderer.render(spec), renderer.name))
        else:
            failures = asyncio.run(_render_llm(sampler, todo, renderer, concurrency, emit))
    finally:
        if fh is not None:
            fh.close()
    return [done[i] for i in range(n) if i in done], failures


async def _render_llm(
    sampler: IntentSampler,
    todo: list[int],
    renderer: LLMRenderer,
    concurrency: int,
    emit: Callable[[IntentRecord], None],
) -> int:
    sem = asyncio.Semaphore(max(1, concurrency))
    failures = 0

    async def one(i: int) -> None:
        nonlocal failures
        spec = sampler.draw(i)
        async with sem:
            try:
                text = await renderer.render(spec)
            except RenderError:
                failures += 1
                return
        emit(IntentRecord.from_spec(spec, text, renderer.name))

    try:
        await asyncio.gather(*(one(i) for i in todo))
    finally:
        await renderer.aclose()
    return failures


@dataclass
class IntentStats:
    """Counts and diversity of an intent pool.

    ``vendi`` is VS_1 (cosine kernel) of the unique pool under ``embedding``; ``fallbacks`` says
    why better embeddings were not used; ``vendi_curve``: ``[pool size, VS_1]`` of the first
    8, 16, 32, … unique intents in draw order (and of the whole pool), the pool as it grows.
    """

    generated: int
    unique_exact: int
    unique: int
    threshold: float
    vendi: float | None
    embedding: str
    fallbacks: list[str] = field(default_factory=list)
    render_failures: int = 0
    complexity: dict[str, int] = field(default_factory=dict)
    primary_domains: dict[str, int] = field(default_factory=dict)
    vendi_curve: list[list[float]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def dedup_intents(
    records: list[IntentRecord],
    embedder: Embedder,
    threshold: float = 0.90,
    progress: Progress | None = None,
) -> tuple[list[IntentRecord], IntentStats]:
    """Exact then near-duplicate dedup (within primary domains), and the Vendi Score of the
    unique pool. Returns (kept records in input order, stats)."""
    exact = [records[i] for i in dedup_exact([r.intent for r in records])]
    if not exact:
        return [], IntentStats(
            len(records), 0, 0, threshold, None, embedder.name, list(embedder.fallbacks)
        )
    emb = embedder.encode([r.intent for r in exact], progress=progress)
    result = dedup_near(emb, [r.primary_domain for r in exact], threshold=threshold)
    kept = [exact[i] for i in result.kept]
    kept_emb = emb[result.kept]
    sizes = [k for k in (2**j for j in range(3, 40)) if k < len(kept)] + [len(kept)]
    stats = IntentStats(
        generated=len(records),
        unique_exact=len(exact),
        unique=len(kept),
        threshold=threshold,
        vendi=vendi_score(kept_emb),
        embedding=embedder.name,
        fallbacks=list(embedder.fallbacks),
        complexity=dict(Counter(r.complexity for r in kept)),
        primary_domains=dict(Counter(r.primary_domain for r in kept)),
        vendi_curve=[[k, round(vendi_score(kept_emb[:k]), 4)] for k in sizes],
    )
    return kept, stats
