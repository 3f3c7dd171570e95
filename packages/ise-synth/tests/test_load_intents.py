"""Intents from Hugging Face `datasets` files (JSON, Parquet) as well as JSON Lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clawrl.ise_synth import (
    IntentSampler,
    IseSynthError,
    TemplateRenderer,
    generate_checkable_intents,
    generate_intents,
    load_intents,
    load_taxonomy,
    write_intents,
)
from clawrl.ise_synth.cli import main

datasets = pytest.importorskip("datasets")


def _records() -> list:
    template, _ = generate_intents(IntentSampler(load_taxonomy(), seed=2), 2, TemplateRenderer())
    # checkable intents: nested lists of objects whose keys differ (checks of several kinds)
    return [*generate_checkable_intents(4, seed=5, split="heldout"), *template]


@pytest.mark.parametrize("fmt", ["parquet", "json-lines", "json-array"])
def test_intents_round_trip_through_a_datasets_file(tmp_path: Path, fmt: str) -> None:
    records = _records()
    rows = [r.to_dict() for r in records]
    if fmt == "parquet":
        path = tmp_path / "intents.parquet"
        datasets.Dataset.from_list(rows).to_parquet(str(path))
    elif fmt == "json-lines":
        path = tmp_path / "intents.json"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        path = tmp_path / "intents.json"
        path.write_text(json.dumps(rows))
    loaded = load_intents(path)
    assert [r.to_dict() for r in loaded] == rows  # the columnar nulls are gone again
    assert any(r.extra.get("checks") for r in loaded)


def test_export_tasks_reads_a_parquet_file(tmp_path: Path) -> None:
    records = generate_checkable_intents(3, seed=1, split="heldout")
    path = tmp_path / "heldout.parquet"
    datasets.Dataset.from_list([r.to_dict() for r in records]).to_parquet(str(path))
    assert main(["export-tasks", "--intents", str(path), "-o", str(tmp_path / "suite")]) == 0
    tasks = sorted(p.name for p in (tmp_path / "suite").iterdir() if p.is_dir())
    assert len(tasks) == 3
    jsonl = tmp_path / "heldout.jsonl"
    write_intents(jsonl, records)
    assert [r.to_dict() for r in load_intents(jsonl)] == [r.to_dict() for r in records]


def test_bad_intent_files_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(IseSynthError, match="no intents file"):
        load_intents(tmp_path / "none.parquet")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"id": "x", "intent": "do it"}]))
    with pytest.raises(IseSynthError, match="row 0"):
        load_intents(bad)
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"not parquet")
    with pytest.raises(IseSynthError, match="cannot read intents"):
        load_intents(junk)
    assert main(["export-tasks", "--intents", str(junk), "-o", str(tmp_path / "s")]) == 2
