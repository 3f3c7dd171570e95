"""Vendi Score (Friedman & Dieng 2022, "The Vendi Score: A Diversity Evaluation Metric for
Machine Learning", TMLR 2023), order q = 1, cosine kernel.

For a PSD similarity matrix K (n × n) with unit diagonal, with λ_i the eigenvalues of K/n
(they are ≥ 0 and sum to 1):

    VS_1(K) = exp(−Σ_i λ_i log λ_i)        (0 log 0 = 0)

With L2-normalised embeddings X (n × d) and the cosine kernel K = XXᵀ, the nonzero eigenvalues
of XXᵀ/n equal those of XᵀX/n (d × d), so :func:`vendi_score` eigen-decomposes the smaller of
the two: O(n·d² + d³) instead of O(n³) when d < n. VS is 1 for n identical items and n for n
mutually orthogonal ones (effective number of distinct items).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from clawrl.ise_synth.errors import EmbeddingError

__all__ = ["entropy_exp", "vendi_score", "vendi_score_from_kernel"]


def entropy_exp(eigenvalues: npt.ArrayLike) -> float:
    """exp(Shannon entropy) of eigenvalues normalised to sum 1 (negatives from round-off → 0)."""
    lam = np.clip(np.asarray(eigenvalues, dtype=np.float64), 0.0, None)
    total = lam.sum()
    if total <= 0:
        raise EmbeddingError("eigenvalues sum to zero")
    lam = lam[lam > 0] / total
    return float(np.exp(-np.sum(lam * np.log(lam))))


def vendi_score(embeddings: npt.ArrayLike, normalize: bool = True) -> float:
    """VS_1 of the cosine kernel over ``embeddings``, via the d × d dual form.

    Args:
        embeddings: shape (n, d), n >= 1, any real dtype (computed in float64).
        normalize: L2-normalise rows first (cosine kernel). With False the rows must already
            have unit norm (K must have a unit diagonal).

    Returns:
        The score in [1, min(n, d)].

    Raises:
        EmbeddingError: not 2-D, empty, non-finite, a zero row, or (normalize=False) rows
            whose norm is not 1.
    """
    x = np.asarray(embeddings, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise EmbeddingError(f"embeddings must have shape (n, d) with n, d >= 1, got {x.shape}")
    if not np.isfinite(x).all():
        raise EmbeddingError("embeddings contain NaN or inf")
    norms = np.linalg.norm(x, axis=1)
    if (norms == 0).any():
        raise EmbeddingError("an embedding is the zero vector (cosine undefined)")
    if normalize:
        x = x / norms[:, None]
    elif not np.allclose(norms, 1.0, atol=1e-6):
        raise EmbeddingError("rows must have unit norm when normalize=False")
    n, d = x.shape
    gram = (x.T @ x) / n if d <= n else (x @ x.T) / n
    return entropy_exp(np.linalg.eigvalsh(gram))


def vendi_score_from_kernel(kernel: npt.ArrayLike) -> float:
    """VS_1 from a PSD similarity matrix with unit diagonal (the primal n × n form, O(n³)).

    Raises EmbeddingError when the matrix is not square or its diagonal is not 1.
    """
    k = np.asarray(kernel, dtype=np.float64)
    if k.ndim != 2 or k.shape[0] != k.shape[1] or k.shape[0] == 0:
        raise EmbeddingError(f"kernel must be a non-empty square matrix, got {k.shape}")
    if not np.allclose(np.diag(k), 1.0, atol=1e-6):
        raise EmbeddingError("kernel diagonal must be 1")
    return entropy_exp(np.linalg.eigvalsh((k + k.T) / 2 / k.shape[0]))
