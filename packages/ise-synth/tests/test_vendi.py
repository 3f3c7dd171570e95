import numpy as np
import pytest
from clawrl.ise_synth import EmbeddingError, vendi_score, vendi_score_from_kernel
from hypothesis import given, settings
from hypothesis import strategies as st


def _primal(x: np.ndarray) -> float:
    """VS_1 straight from the definition: eigenvalues of K/n, K = cosine kernel (n × n)."""
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    lam = np.linalg.eigvalsh(x @ x.T / len(x))
    lam = lam[lam > 1e-12]
    return float(np.exp(-np.sum(lam * np.log(lam))))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), d=st.integers(1, 40), seed=st.integers(0, 2**32 - 1))
def test_dual_form_equals_primal_eigenvalues(n: int, d: int, seed: int) -> None:
    x = np.random.default_rng(seed).normal(size=(n, d))
    vs = vendi_score(x)
    assert vs == pytest.approx(_primal(x), rel=1e-6, abs=1e-6)
    assert vs == pytest.approx(vendi_score_from_kernel(_cos(x)), rel=1e-6, abs=1e-6)
    assert 1.0 - 1e-9 <= vs <= min(n, d) + 1e-6


def _cos(x: np.ndarray) -> np.ndarray:
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    return x @ x.T


def test_dual_form_on_large_n_small_d_matches_primal() -> None:
    x = np.random.default_rng(0).normal(size=(600, 16))  # d×d path, d << n
    assert vendi_score(x) == pytest.approx(_primal(x), rel=1e-8)


@pytest.mark.parametrize("n", [1, 2, 7, 50])
def test_identical_items_score_one(n: int) -> None:
    x = np.tile(np.random.default_rng(n).normal(size=(1, 12)), (n, 1))
    assert vendi_score(x) == pytest.approx(1.0, abs=1e-9)
    assert vendi_score_from_kernel(np.ones((n, n))) == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize(("n", "d"), [(1, 1), (3, 3), (8, 20), (32, 32)])
def test_orthogonal_items_score_n(n: int, d: int) -> None:
    q, _ = np.linalg.qr(np.random.default_rng(d).normal(size=(d, d)))
    x = q[:n] * np.random.default_rng(1).uniform(0.5, 3.0, size=(n, 1))  # any scale
    assert vendi_score(x) == pytest.approx(float(n), rel=1e-9)
    assert vendi_score_from_kernel(np.eye(n)) == pytest.approx(float(n), rel=1e-9)


def test_k_distinct_groups_of_copies_score_k() -> None:
    x = np.repeat(np.eye(4), 5, axis=0)  # 4 orthogonal items, 5 copies each
    assert vendi_score(x) == pytest.approx(4.0, rel=1e-9)


@pytest.mark.parametrize(
    "bad",
    [np.zeros((0, 3)), np.zeros((3,)), np.array([[1.0, np.nan]]), np.array([[0.0, 0.0], [1, 0]])],
)
def test_bad_embeddings_raise_typed_error(bad: np.ndarray) -> None:
    with pytest.raises(EmbeddingError):
        vendi_score(bad)


def test_unnormalised_rows_rejected_without_normalize() -> None:
    with pytest.raises(EmbeddingError):
        vendi_score(np.array([[2.0, 0.0]]), normalize=False)
    assert vendi_score(np.array([[1.0, 0.0], [0.0, 1.0]]), normalize=False) == pytest.approx(2.0)


def test_kernel_must_be_square_with_unit_diagonal() -> None:
    with pytest.raises(EmbeddingError):
        vendi_score_from_kernel(np.ones((2, 3)))
    with pytest.raises(EmbeddingError):
        vendi_score_from_kernel(2 * np.eye(3))
