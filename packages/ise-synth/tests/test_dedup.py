import numpy as np
import pytest
from clawrl.ise_synth import EmbeddingError, dedup_exact, dedup_near, normalize_text
from hypothesis import given, settings
from hypothesis import strategies as st


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@st.composite
def pools(draw: st.DrawFn) -> tuple[np.ndarray, list[int], float, int]:
    """Embeddings with planted near-duplicates, group labels, a threshold and a block size."""
    n = draw(st.integers(1, 60))
    d = draw(st.integers(2, 8))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    base = rng.normal(size=(max(1, n // 3), d))
    x = base[rng.integers(len(base), size=n)] + rng.normal(
        scale=draw(st.sampled_from([0.01, 0.2, 1.0])), size=(n, d)
    )
    groups = list(rng.integers(draw(st.integers(1, 4)), size=n))
    return (
        x,
        groups,
        draw(st.sampled_from([0.5, 0.8, 0.9, 0.99])),
        draw(st.sampled_from([1, 3, 512])),
    )


@settings(max_examples=150, deadline=None)
@given(pools())
def test_near_dedup_greedy_invariants(pool: tuple[np.ndarray, list[int], float, int]) -> None:
    x, groups, t, block = pool
    res = dedup_near(x, groups, threshold=t, block=block)
    u = _unit(x)
    sims = u @ u.T
    kept = res.kept
    assert kept == sorted(kept)
    assert set(kept) | set(res.dropped) == set(range(len(x)))
    assert not set(kept) & set(res.dropped)
    # kept items of one group are pairwise below the threshold
    for a in kept:
        for b in kept:
            if a < b and groups[a] == groups[b]:
                assert sims[a, b] < t + 1e-5
    # every dropped item matches an earlier kept item of its own group
    for i, j in res.dropped.items():
        assert j in kept and j < i and groups[j] == groups[i]
        assert sims[i, j] >= t - 1e-5
    # the first item of each group is always kept
    for g in set(groups):
        assert groups.index(g) in kept
    # idempotent: dedup of the kept pool keeps everything
    again = dedup_near(x[kept], [groups[k] for k in kept], threshold=t, block=block)
    assert again.kept == list(range(len(kept)))


@settings(max_examples=50, deadline=None)
@given(pools())
def test_block_size_does_not_change_result(pool: tuple[np.ndarray, list[int], float, int]) -> None:
    x, groups, t, _ = pool
    assert dedup_near(x, groups, t, block=1).kept == dedup_near(x, groups, t, block=7).kept


def test_groups_are_not_compared_across() -> None:
    x = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    assert dedup_near(x, ["a", "b", "a"]).kept == [0, 1]
    assert dedup_near(x).kept == [0]


def test_threshold_is_inclusive() -> None:
    x = np.array([[1.0, 0.0], [0.9, np.sqrt(1 - 0.81)]])  # cosine exactly 0.9
    assert dedup_near(x, threshold=0.9).kept == [0]
    assert dedup_near(x, threshold=0.91).kept == [0, 1]


def test_bad_inputs_raise_typed_errors() -> None:
    with pytest.raises(EmbeddingError):
        dedup_near(np.zeros((3,)))
    with pytest.raises(EmbeddingError):
        dedup_near(np.zeros((2, 2)))
    with pytest.raises(EmbeddingError):
        dedup_near(np.ones((2, 2)), groups=["a"])
    assert dedup_near(np.zeros((0, 4))).kept == []


texts = st.lists(st.text(alphabet=st.sampled_from("aAbB .,!?\t\n"), max_size=8), max_size=30)


@settings(max_examples=200, deadline=None)
@given(texts)
def test_exact_dedup_properties(items: list[str]) -> None:
    kept = dedup_exact(items)
    keys = [normalize_text(items[i]) for i in kept]
    assert kept == sorted(kept)
    assert len(set(keys)) == len(keys)  # unique normalised texts
    assert set(keys) == {normalize_text(t) for t in items}  # nothing lost
    for i in kept:  # first occurrence kept
        assert all(normalize_text(items[j]) != normalize_text(items[i]) for j in range(i))
    assert dedup_exact([items[i] for i in kept]) == list(range(len(kept)))


def test_normalize_text() -> None:
    assert normalize_text("  Hello,   WORLD!\n") == "hello world"
    assert normalize_text("Ｃｒｅａｔｅ a file") == "create a file"  # NFKC full-width
    assert dedup_exact(["Create a file.", "create a FILE", "create two files"]) == [0, 2]
