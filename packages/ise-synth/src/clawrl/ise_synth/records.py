"""Intent records (the output of stage 1) and their JSONL files.

A record holds the fields of an ISE intent: ``id``, the natural-language ``intent``, the
``persona`` (name, role, industry, expertise, experience_level, communication_style,
work_context), the ``domains`` with 1–3 selected ``tasks`` each (first = primary), the ``tools``
and ``skills`` used, and the ``complexity``; plus provenance: ``renderer`` (``"template"`` or
``"llm:<model>"``), ``seed`` and ``index`` of the draw.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from clawrl.bench import iter_json_objects
from clawrl.ise_synth.errors import IseSynthError
from clawrl.ise_synth.sampling import IntentSpec

__all__ = ["IntentRecord", "load_intents", "read_intents", "write_intents"]


@dataclass
class IntentRecord:
    """One rendered intent (see the module docstring for the fields)."""

    id: str
    intent: str
    persona: dict[str, str]
    domains: list[dict[str, Any]]
    tools: list[str]
    skills: list[str]
    complexity: str
    renderer: str
    seed: int
    index: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def primary_domain(self) -> str:
        """Id of the first domain (the dedup group)."""
        return str(self.domains[0]["domain"])

    @classmethod
    def from_spec(cls, spec: IntentSpec, intent: str, renderer: str) -> IntentRecord:
        """A record for ``spec`` rendered as ``intent``; the id hashes seed, index, text."""
        digest = hashlib.sha1(f"{spec.seed}\0{spec.index}\0{intent}".encode()).hexdigest()[:12]
        return cls(
            id=f"intent-{spec.index:06d}-{digest}",
            intent=intent,
            persona=spec.persona.to_dict(),
            domains=[
                {
                    "domain": sel.domain.id,
                    "name": sel.domain.name,
                    "tasks": [t.task for t in sel.tasks],
                }
                for sel in spec.domains
            ],
            tools=list(spec.tools),
            skills=list(spec.skills),
            complexity=spec.complexity,
            renderer=renderer,
            seed=spec.seed,
            index=spec.index,
        )

    def to_dict(self) -> dict[str, Any]:
        out = {
            "id": self.id,
            "intent": self.intent,
            "persona": self.persona,
            "domains": self.domains,
            "tools": self.tools,
            "skills": self.skills,
            "complexity": self.complexity,
            "renderer": self.renderer,
            "seed": self.seed,
            "index": self.index,
        }
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> IntentRecord:
        """Raises IseSynthError when a required field is missing, ``id`` / ``intent`` is not a
        non-empty string, or ``seed`` / ``index`` is not an integer."""
        names = ("id", "intent", "persona", "domains", "tools", "skills", "complexity")
        missing = [k for k in names if k not in d]
        if missing:
            raise IseSynthError(f"intent record lacks {missing}")
        for key in ("id", "intent"):
            if not isinstance(d[key], str) or not d[key].strip():
                raise IseSynthError(f"intent record's {key!r} must be a non-empty string")
        known = {*names, "renderer", "seed", "index"}
        try:
            seed, index = int(d.get("seed", 0)), int(d.get("index", 0))
        except (TypeError, ValueError) as exc:
            raise IseSynthError(f"intent record {d['id']!r}: seed / index: {exc}") from exc
        return cls(
            **{k: d[k] for k in names},
            renderer=d.get("renderer", "unknown"),
            seed=seed,
            index=index,
            extra={k: v for k, v in d.items() if k not in known},
        )


def write_intents(path: Path, records: Iterable[IntentRecord]) -> int:
    """Write records as JSONL (one object per line); returns how many were written."""
    n = 0
    with path.open("wb") as fh:
        for rec in records:
            fh.write(orjson.dumps(rec.to_dict()) + b"\n")
            n += 1
    return n


def read_intents(path: Path) -> Iterator[IntentRecord]:
    """Read a JSONL file of records. A half-written last line (no newline) is skipped; any
    other malformed line raises IseSynthError naming the line."""
    for obj in iter_json_objects(path, IseSynthError):
        yield IntentRecord.from_dict(obj)


def _drop_nulls(value: Any) -> Any:
    """``value`` without the null fields a columnar format adds to nested objects (Arrow
    gives every object of a list the union of their keys, the missing ones null)."""
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def load_intents(path: Path) -> list[IntentRecord]:
    """Intent records from ``path``: a JSON Lines file (``.jsonl``, :func:`read_intents`), or
    a JSON (``.json``: JSON Lines or one array of records) or Parquet (``.parquet``) file read
    with the Hugging Face ``datasets`` library (the ``hf`` extra), one record per row.

    Raises:
        IseSynthError: the file is missing or unreadable, a row is not a valid record, or
            ``datasets`` is not installed.
    """
    if not path.exists():
        raise IseSynthError(f"no intents file {path}")
    suffix = path.suffix.lower()
    if suffix not in (".json", ".parquet"):
        return list(read_intents(path))
    try:
        import datasets
    except ImportError as exc:
        raise IseSynthError(
            f"reading {path.name} needs the datasets library: install clawrl-ise-synth[hf]"
        ) from exc
    import tempfile

    datasets.disable_progress_bars()
    with tempfile.TemporaryDirectory(prefix="clawrl-intents-") as cache:
        try:
            ds = datasets.load_dataset(
                "parquet" if suffix == ".parquet" else "json",
                data_files=str(path),
                split="train",
                cache_dir=cache,
            )
        except Exception as exc:  # datasets / pyarrow raise many unrelated types
            raise IseSynthError(f"cannot read intents from {path}: {exc}") from exc
        rows = [_drop_nulls(dict(row)) for row in ds]
    out = []
    for i, row in enumerate(rows):
        try:
            out.append(IntentRecord.from_dict(row))
        except IseSynthError as exc:
            raise IseSynthError(f"{path}: row {i}: {exc}") from exc
    return out
