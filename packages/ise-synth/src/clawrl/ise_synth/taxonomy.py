"""The 4D intent taxonomy: Persona × Domain × Task × Complexity (ISE stage 1).

The data is ours (``data/personas.json``, ``data/domains.json``): personas with role, industry,
expertise, experience level, communication style and work context; the ten functional domains of
ISE (intelligence core, code runtime, file I/O, source chain, automation flow, web extraction,
comms/social, multimedia, agent memory, system infrastructure), each with tools and a task list
(every task tagged with the skill it exercises); and the complexity levels with their target mix
(simple/medium/complex = 10/40/50 %) and how many domains and tasks per domain each level draws.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from clawrl.ise_synth.errors import TaxonomyError

__all__ = ["Complexity", "Domain", "Persona", "Task", "Taxonomy", "load_taxonomy"]


@dataclass(frozen=True)
class Persona:
    """A simulated user: who asks, in which register."""

    name: str
    role: str
    industry: str
    expertise: str
    experience_level: str
    communication_style: str
    work_context: str

    def to_dict(self) -> dict[str, str]:
        """Every field by name, in declaration order."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Task:
    """One task of a domain: a verb phrase ("merge several CSV exports …") and its skill."""

    task: str
    skill: str


@dataclass(frozen=True)
class Domain:
    """A functional domain: id, readable name, description, the tools it uses, its tasks."""

    id: str
    name: str
    description: str
    tools: tuple[str, ...]
    tasks: tuple[Task, ...]


@dataclass(frozen=True)
class Complexity:
    """A complexity level: target share ``weight`` of the mix, inclusive ranges of how many
    domains and how many tasks per domain an intent of this level draws."""

    name: str
    weight: float
    domains: tuple[int, int]
    tasks_per_domain: tuple[int, int]
    description: str


@dataclass(frozen=True)
class Taxonomy:
    """Personas, domains, complexity levels and the communication styles' descriptions."""

    personas: tuple[Persona, ...]
    domains: tuple[Domain, ...]
    complexities: tuple[Complexity, ...]
    communication_styles: dict[str, str]

    def domain(self, domain_id: str) -> Domain:
        """The domain with this id. Raises TaxonomyError if there is none."""
        for d in self.domains:
            if d.id == domain_id:
                return d
        raise TaxonomyError(f"unknown domain {domain_id!r}")

    def complexity(self, name: str) -> Complexity:
        """The complexity level with this name. Raises TaxonomyError if there is none."""
        for c in self.complexities:
            if c.name == name:
                return c
        raise TaxonomyError(f"unknown complexity {name!r}")


def _range(value: Any, what: str) -> tuple[int, int]:
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value)):
        raise TaxonomyError(f"{what}: expected [min, max] integers, got {value!r}")
    lo, hi = value
    if not 1 <= lo <= hi:
        raise TaxonomyError(f"{what}: need 1 <= min <= max, got {value!r}")
    return lo, hi


def load_taxonomy(personas: Path | None = None, domains: Path | None = None) -> Taxonomy:
    """Load and validate the taxonomy (default: the data shipped with the package).

    Raises:
        TaxonomyError: a file is missing or malformed, a persona has an unknown experience level
            or communication style, a complexity draws more domains or tasks than exist, or
            the complexity weights do not sum to 1.
    """
    try:
        data_dir = resources.files("clawrl.ise_synth") / "data"
        p_raw = json.loads(
            personas.read_text() if personas else (data_dir / "personas.json").read_text()
        )
        d_raw = json.loads(
            domains.read_text() if domains else (data_dir / "domains.json").read_text()
        )
    except (OSError, ValueError) as exc:
        raise TaxonomyError(f"cannot read taxonomy data: {exc}") from exc
    try:
        styles = dict(p_raw["communication_styles"])
        levels = set(p_raw["experience_levels"])
        persona_list = tuple(Persona(**p) for p in p_raw["personas"])
        domain_list = tuple(
            Domain(
                id=d["id"],
                name=d["name"],
                description=d["description"],
                tools=tuple(d["tools"]),
                tasks=tuple(Task(**t) for t in d["tasks"]),
            )
            for d in d_raw["domains"]
        )
        complexities = tuple(
            Complexity(
                name=name,
                weight=float(c["weight"]),
                domains=_range(c["domains"], f"complexity {name} domains"),
                tasks_per_domain=_range(c["tasks_per_domain"], f"complexity {name} tasks"),
                description=c["description"],
            )
            for name, c in d_raw["complexity"].items()
        )
    except (KeyError, TypeError) as exc:
        raise TaxonomyError(f"malformed taxonomy data: {exc!r}") from exc
    if not persona_list or not domain_list or not complexities:
        raise TaxonomyError("taxonomy needs at least one persona, domain and complexity")
    for p in persona_list:
        if p.communication_style not in styles:
            raise TaxonomyError(f"{p.name}: unknown communication style {p.communication_style!r}")
        if p.experience_level not in levels:
            raise TaxonomyError(f"{p.name}: unknown experience level {p.experience_level!r}")
    if len({d.id for d in domain_list}) != len(domain_list):
        raise TaxonomyError("duplicate domain ids")
    min_tasks = min(len(d.tasks) for d in domain_list)
    for c in complexities:
        if c.domains[1] > len(domain_list) or c.tasks_per_domain[1] > min_tasks:
            raise TaxonomyError(f"complexity {c.name} draws more domains/tasks than exist")
        if c.weight < 0:
            raise TaxonomyError(f"complexity {c.name}: negative weight")
    total = sum(c.weight for c in complexities)
    if abs(total - 1.0) > 1e-9:
        raise TaxonomyError(f"complexity weights sum to {total}, not 1")
    return Taxonomy(persona_list, domain_list, complexities, styles)
