"""Deduplication of intents: exact (normalised text) and near-duplicate (embedding cosine).

Near-duplicates are removed greedily within each group (ISE: an intent's primary domain): items
are visited in input order and one is dropped when its cosine similarity to an already *kept*
item of its group is ≥ ``threshold`` (default 0.90) — the usual greedy
rule. Invariants (tested with Hypothesis): kept items of one group are pairwise
below the threshold; every dropped item is ≥ threshold to some earlier kept item of its group;
the first item of each group is kept; applying dedup to its own output keeps everything.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from clawrl.ise_synth.errors import EmbeddingError

__all__ = ["DedupResult", "dedup_exact", "dedup_near", "normalize_text"]

_SPACE = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """NFKC, case-folded, punctuation removed, whitespace collapsed: the exact-dedup key."""
    t = unicodedata.normalize("NFKC", text).casefold()
    t = "".join(" " if unicodedata.category(c).startswith("P") else c for c in t)
    return _SPACE.sub(" ", t).strip()


def dedup_exact(texts: Sequence[str]) -> list[int]:
    """Indices of the first occurrence of each normalised text, in input order."""
    seen: set[str] = set()
    kept = []
    for i, t in enumerate(texts):
        key = normalize_text(t)
        if key not in seen:
            seen.add(key)
            kept.append(i)
    return kept


@dataclass(frozen=True)
class DedupResult:
    """Outcome of :func:`dedup_near`: ``kept`` indices (input order) and, for each dropped
    index, the kept index it duplicated (``dropped[i] = j``, j < i, same group)."""

    kept: list[int]
    dropped: dict[int, int]


def dedup_near(
    embeddings: npt.ArrayLike,
    groups: Sequence[Hashable] | None = None,
    threshold: float = 0.90,
    block: int = 512,
) -> DedupResult:
    """Greedy near-duplicate removal by cosine similarity within groups.

    Args:
        embeddings: shape (n, d); rows are L2-normalised here (cosine).
        groups: a group key per item (e.g. primary domain); None = one group.
        threshold: drop an item whose cosine to an earlier kept item of its group is >= this.
        block: items compared per matrix product (memory ~ block × kept × 4 bytes).

    Raises:
        EmbeddingError: wrong shape, non-finite values, a zero row, or len(groups) != n.
    """
    x = np.asarray(embeddings, dtype=np.float32)
    if x.ndim != 2:
        raise EmbeddingError(f"embeddings must be 2-D (n, d), got shape {x.shape}")
    n = x.shape[0]
    if n == 0:
        return DedupResult([], {})
    if not np.isfinite(x).all():
        raise EmbeddingError("embeddings contain NaN or inf")
    norms = np.linalg.norm(x, axis=1)
    if (norms == 0).any():
        raise EmbeddingError("an embedding is the zero vector (cosine undefined)")
    x = x / norms[:, None]
    keys = list(groups) if groups is not None else [0] * n
    if len(keys) != n:
        raise EmbeddingError(f"{len(keys)} group keys for {n} embeddings")
    members: dict[Hashable, list[int]] = {}
    for i, g in enumerate(keys):
        members.setdefault(g, []).append(i)
    kept_all: list[int] = []
    dropped: dict[int, int] = {}
    for idx in members.values():
        kept: list[int] = []
        kept_vecs = np.empty((0, x.shape[1]), dtype=np.float32)
        for start in range(0, len(idx), block):
            chunk = idx[start : start + block]
            cx = x[chunk]
            # best earlier-kept match for every item of the chunk (kept before this chunk)
            if len(kept):
                sims = cx @ kept_vecs.T
                best = sims.argmax(axis=1)
                best_sim = sims[np.arange(len(chunk)), best]
            else:
                best = np.zeros(len(chunk), dtype=np.int64)
                best_sim = np.full(len(chunk), -np.inf, dtype=np.float32)
            inner = cx @ cx.T  # for matches against items kept inside this chunk
            chunk_kept: list[int] = []
            for j, item in enumerate(chunk):
                if best_sim[j] >= threshold:
                    dropped[item] = kept[int(best[j])]
                    continue
                if chunk_kept:
                    row = inner[j, chunk_kept]
                    c = int(row.argmax())
                    if row[c] >= threshold:
                        dropped[item] = chunk[chunk_kept[c]]
                        continue
                chunk_kept.append(j)
            kept.extend(chunk[c] for c in chunk_kept)
            kept_vecs = np.concatenate([kept_vecs, cx[chunk_kept]], axis=0)
        kept_all.extend(kept)
    return DedupResult(sorted(kept_all), dropped)
