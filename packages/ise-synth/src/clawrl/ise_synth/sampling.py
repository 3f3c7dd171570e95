"""Seeded combinatorial sampling of intent specs: Persona × Domain × Task × Complexity.

An :class:`IntentSpec` is the structured tuple an intent is rendered from. Draw ``i`` of a
sampler with seed ``s`` depends only on ``(s, i)`` (a NumPy ``Generator`` seeded with
``[s, i]``), so a run can be resumed or sharded and gives the same specs.

Per draw: complexity ~ Categorical(taxonomy weights, 10/40/50 % by default); persona ~ uniform;
number of domains k ~ uniform on the complexity's range; the primary domain ~ uniform, the other
k − 1 uniform without replacement; per domain, tasks ~ uniform without replacement, their number
uniform on the complexity's tasks-per-domain range.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from clawrl.ise_synth.errors import TaxonomyError
from clawrl.ise_synth.taxonomy import Domain, Persona, Task, Taxonomy

__all__ = ["DomainSelection", "IntentSampler", "IntentSpec"]


@dataclass(frozen=True)
class DomainSelection:
    """One domain of an intent and the 1–3 tasks selected from it."""

    domain: Domain
    tasks: tuple[Task, ...]


@dataclass(frozen=True)
class IntentSpec:
    """The structured tuple behind one intent. ``domains[0]`` is the primary domain."""

    index: int
    seed: int
    persona: Persona
    complexity: str
    domains: tuple[DomainSelection, ...]

    @property
    def primary_domain(self) -> str:
        """Id of the first (primary) domain: the dedup group."""
        return self.domains[0].domain.id

    @property
    def tools(self) -> tuple[str, ...]:
        """Union of the selected domains' tools, in first-seen order."""
        return tuple(dict.fromkeys(t for sel in self.domains for t in sel.domain.tools))

    @property
    def skills(self) -> tuple[str, ...]:
        """Skills of the selected tasks, in order, without repeats."""
        return tuple(dict.fromkeys(t.skill for sel in self.domains for t in sel.tasks))

    def key(self) -> tuple[object, ...]:
        """Identity of the combination (persona, complexity, domains and tasks)."""
        return (
            self.persona.name,
            self.complexity,
            tuple((sel.domain.id, tuple(t.task for t in sel.tasks)) for sel in self.domains),
        )


class IntentSampler:
    """Draws :class:`IntentSpec` from a taxonomy, reproducibly.

    Args:
        taxonomy: personas, domains and complexity levels.
        seed: base seed; draw ``i`` uses ``numpy.random.default_rng([seed, i])``.
        complexity_mix: optional override of the complexity weights, ``{name: weight}``
            (normalised here). Raises TaxonomyError for unknown names or a zero total.
    """

    def __init__(
        self, taxonomy: Taxonomy, seed: int = 0, complexity_mix: dict[str, float] | None = None
    ) -> None:
        self.taxonomy = taxonomy
        self.seed = int(seed)
        names = [c.name for c in taxonomy.complexities]
        if complexity_mix is None:
            weights = np.array([c.weight for c in taxonomy.complexities], dtype=np.float64)
        else:
            unknown = set(complexity_mix) - set(names)
            if unknown:
                raise TaxonomyError(f"unknown complexity levels in mix: {sorted(unknown)}")
            weights = np.array([complexity_mix.get(n, 0.0) for n in names], dtype=np.float64)
        if (weights < 0).any() or weights.sum() <= 0:
            raise TaxonomyError(f"complexity weights must be >= 0 with a positive sum: {weights}")
        self._names = names
        self._weights = weights / weights.sum()

    def draw(self, index: int) -> IntentSpec:
        """The spec of draw ``index`` (>= 0); the same for the same seed and index."""
        if index < 0:
            raise ValueError(f"index must be >= 0, got {index}")
        rng = np.random.default_rng([self.seed, index])
        tax = self.taxonomy
        level = self._names[int(rng.choice(len(self._names), p=self._weights))]
        complexity = tax.complexity(level)
        persona = tax.personas[int(rng.integers(len(tax.personas)))]
        k = int(rng.integers(complexity.domains[0], complexity.domains[1] + 1))
        domain_idx = rng.choice(len(tax.domains), size=k, replace=False)
        selections = []
        for di in domain_idx:
            domain = tax.domains[int(di)]
            m = int(
                rng.integers(complexity.tasks_per_domain[0], complexity.tasks_per_domain[1] + 1)
            )
            task_idx = rng.choice(len(domain.tasks), size=m, replace=False)
            selections.append(
                DomainSelection(domain, tuple(domain.tasks[int(t)] for t in task_idx))
            )
        return IntentSpec(index, self.seed, persona, level, tuple(selections))

    def sample(self, n: int, start: int = 0, unique: bool = False) -> Iterator[IntentSpec]:
        """``n`` specs from draw ``start`` on. With ``unique``, draws whose combination was
        already produced are skipped (more than ``n`` draws may be made; gives up after
        ``50 * n`` draws, raising TaxonomyError, when the taxonomy has too few combinations)."""
        seen: set[tuple[object, ...]] = set()
        produced, index = 0, start
        while produced < n:
            if unique and index - start > 50 * max(n, 1):
                raise TaxonomyError(f"could not draw {n} unique combinations")
            spec = self.draw(index)
            index += 1
            if unique:
                key = spec.key()
                if key in seen:
                    continue
                seen.add(key)
            produced += 1
            yield spec
