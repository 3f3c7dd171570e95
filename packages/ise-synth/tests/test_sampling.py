import json
from collections import Counter
from pathlib import Path

import pytest
from clawrl.ise_synth import IntentSampler, TaxonomyError, load_taxonomy

TAX = load_taxonomy()


def test_shipped_taxonomy_covers_the_ise_dimensions() -> None:
    assert {d.name for d in TAX.domains} == {
        "intelligence core", "code runtime", "file I/O", "source chain", "automation flow",
        "web extraction", "comms/social", "multimedia", "agent memory", "system infrastructure",
    }  # fmt: skip
    assert len(TAX.personas) >= 40
    assert len({p.industry for p in TAX.personas}) >= 20
    assert len({p.name for p in TAX.personas}) == len(TAX.personas)
    assert {c.name: c.weight for c in TAX.complexities} == {
        "simple": 0.10, "medium": 0.40, "complex": 0.50,
    }  # fmt: skip
    assert all(len(d.tasks) >= 5 and d.tools for d in TAX.domains)


def test_complexity_mix_within_tolerance_over_10k_draws() -> None:
    sampler = IntentSampler(TAX, seed=123)
    counts = Counter(spec.complexity for spec in sampler.sample(10_000))
    # binomial sd at n=10k is <= 0.005; 0.02 is 4 sd
    assert counts["simple"] / 10_000 == pytest.approx(0.10, abs=0.02)
    assert counts["medium"] / 10_000 == pytest.approx(0.40, abs=0.02)
    assert counts["complex"] / 10_000 == pytest.approx(0.50, abs=0.02)


def test_draws_respect_complexity_ranges_and_are_reproducible() -> None:
    a, b = IntentSampler(TAX, seed=7), IntentSampler(TAX, seed=7)
    primaries = Counter()
    for i in range(2000):
        spec = a.draw(i)
        assert spec == b.draw(i)  # same seed and index, same spec
        level = TAX.complexity(spec.complexity)
        assert level.domains[0] <= len(spec.domains) <= level.domains[1]
        ids = [sel.domain.id for sel in spec.domains]
        assert len(set(ids)) == len(ids)
        for sel in spec.domains:
            assert level.tasks_per_domain[0] <= len(sel.tasks) <= level.tasks_per_domain[1]
            assert len(set(sel.tasks)) == len(sel.tasks)
            assert all(t in sel.domain.tasks for t in sel.tasks)
        assert spec.primary_domain == ids[0]
        assert set(spec.tools) == {t for sel in spec.domains for t in sel.domain.tools}
        primaries[spec.primary_domain] += 1
    assert len(primaries) == 10  # every domain is a primary domain sometimes
    assert IntentSampler(TAX, seed=8).draw(0) != a.draw(0) or a.draw(1) != IntentSampler(
        TAX, seed=8
    ).draw(1)


def test_unique_sampling_and_mix_override() -> None:
    sampler = IntentSampler(TAX, seed=1, complexity_mix={"simple": 1.0})
    specs = list(sampler.sample(300, unique=True))
    assert len({s.key() for s in specs}) == 300
    assert {s.complexity for s in specs} == {"simple"}
    with pytest.raises(TaxonomyError):
        IntentSampler(TAX, complexity_mix={"trivial": 1.0})
    with pytest.raises(TaxonomyError):
        IntentSampler(TAX, complexity_mix={"simple": 0.0})


def test_bad_taxonomy_files_raise_typed_errors(tmp_path: Path) -> None:
    personas = json.loads(
        (Path(__file__).parents[1] / "src/clawrl/ise_synth/data/personas.json").read_text()
    )
    personas["personas"][0]["communication_style"] = "telepathic"
    bad = tmp_path / "p.json"
    bad.write_text(json.dumps(personas))
    with pytest.raises(TaxonomyError, match="telepathic"):
        load_taxonomy(personas=bad)
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(TaxonomyError):
        load_taxonomy(domains=tmp_path / "broken.json")
    with pytest.raises(TaxonomyError):
        load_taxonomy(domains=tmp_path / "missing.json")
