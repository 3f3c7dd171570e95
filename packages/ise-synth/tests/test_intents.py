import json
from pathlib import Path

import numpy as np
import pytest
from clawrl.ise_synth import (
    IntentRecord,
    IntentSampler,
    IseSynthError,
    TemplateRenderer,
    TfidfEmbedder,
    dedup_intents,
    generate_intents,
    load_embedder,
    load_taxonomy,
    read_intents,
    vendi_score,
    write_intents,
)
from clawrl.ise_synth.cli import main

TAX = load_taxonomy()
FIELDS = {"id", "intent", "persona", "domains", "tools", "skills", "complexity"}
PERSONA_FIELDS = {
    "name", "role", "industry", "expertise", "experience_level", "communication_style",
    "work_context",
}  # fmt: skip


def test_records_have_the_ise_fields_and_round_trip(tmp_path: Path) -> None:
    records, failures = generate_intents(IntentSampler(TAX, seed=5), 50, TemplateRenderer())
    assert failures == 0 and [r.index for r in records] == list(range(50))
    path = tmp_path / "i.jsonl"
    assert write_intents(path, records) == 50
    back = list(read_intents(path))
    assert [r.to_dict() for r in back] == [r.to_dict() for r in records]
    for line in path.read_text().splitlines():
        d = json.loads(line)
        assert set(d) >= FIELDS and set(d["persona"]) == PERSONA_FIELDS
        assert 1 <= len(d["domains"]) <= 3
        assert all(1 <= len(dom["tasks"]) <= 3 for dom in d["domains"])
        assert d["renderer"] == "template" and d["seed"] == 5
    assert len({r.id for r in records}) == 50


def test_generation_resumes_from_the_raw_file(tmp_path: Path) -> None:
    raw = tmp_path / "raw.jsonl"
    sampler, renderer = IntentSampler(TAX, seed=2), TemplateRenderer()
    first, _ = generate_intents(sampler, 10, renderer, raw_path=raw)
    # simulate a crash mid-write: a half-written last line
    with raw.open("ab") as fh:
        fh.write(b'{"id": "intent-000010-')
    ticks: list[int] = []
    full, _ = generate_intents(sampler, 25, renderer, raw_path=raw, progress=ticks.append)
    assert ticks[0] == 10 and sum(ticks) == 25  # 10 reused, 15 rendered
    assert [r.to_dict() for r in full[:10]] == [r.to_dict() for r in first]
    fresh, _ = generate_intents(IntentSampler(TAX, seed=2), 25, renderer)
    assert [r.intent for r in full] == [r.intent for r in fresh]


def test_malformed_record_line_is_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": 1}\n')
    with pytest.raises(IseSynthError, match="lacks"):
        list(read_intents(path))
    path.write_text("nope\n{}\n")
    with pytest.raises(IseSynthError, match=":1: not valid JSON"):
        list(read_intents(path))


def _record(i: int, text: str, domain: str) -> IntentRecord:
    return IntentRecord(
        id=f"r{i}", intent=text, persona={}, domains=[{"domain": domain, "tasks": []}],
        tools=[], skills=[], complexity="simple", renderer="test", seed=0, index=i,
    )  # fmt: skip


def test_dedup_intents_exact_near_and_vendi_with_tfidf() -> None:
    records = [
        _record(0, "Merge the CSV exports into one file", "file_io"),
        _record(1, "merge the csv exports into one file!", "file_io"),  # exact (normalised)
        _record(2, "Merge the CSV exports into one file please", "file_io"),  # near
        _record(3, "Merge the CSV exports into one file, please", "code_runtime"),  # exact: global
        _record(4, "Merge the CSV exports into one file now", "code_runtime"),  # near, other domain
        _record(5, "Rotate and compress the nginx logs", "system_infrastructure"),
    ]
    kept, stats = dedup_intents(records, TfidfEmbedder(), threshold=0.8)
    assert [r.id for r in kept] == ["r0", "r4", "r5"]
    assert (stats.generated, stats.unique_exact, stats.unique) == (6, 4, 3)
    assert stats.embedding.startswith("tfidf") and stats.vendi is not None
    assert 1.0 < stats.vendi <= 3.0
    assert stats.primary_domains == {"file_io": 1, "code_runtime": 1, "system_infrastructure": 1}


def test_cli_writes_intents_stats_and_raw(tmp_path: Path) -> None:
    out = tmp_path / "out" / "intents.jsonl"
    rc = main(["intents", "-n", "300", "--seed", "4", "-o", str(out), "--embedding", "tfidf"])
    assert rc == 0
    stats = json.loads((tmp_path / "out" / "intents.stats.json").read_text())
    lines = out.read_text().splitlines()
    assert stats["generated"] == 300 and stats["unique"] == len(lines) > 200
    assert stats["embedding"] == "tfidf(max_features=2048)" and stats["vendi"] > 1
    assert sum(stats["complexity"].values()) == len(lines)
    assert len((tmp_path / "out" / "intents.raw.jsonl").read_text().splitlines()) == 300
    # rerun: everything comes from the raw file, same result
    assert (
        main(["intents", "-n", "300", "--seed", "4", "-o", str(out), "--embedding", "tfidf"]) == 0
    )
    assert out.read_text().splitlines() == lines


def test_cli_vendi_scores_the_pool_and_its_prefixes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "intents.jsonl"
    assert main(["intents", "-n", "60", "--seed", "1", "-o", str(out), "--embedding", "tfidf"]) == 0
    n = len(out.read_text().splitlines())
    capsys.readouterr()
    js = tmp_path / "vendi.json"
    argv = ["vendi", str(out), "--embedding", "tfidf", "--sizes", "1", "8", "--out", str(js)]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result == json.loads(js.read_text())  # the same on disk
    assert result["n"] == n and result["embedding"].startswith("tfidf")
    curve = {int(k): v for k, v in result["curve"].items()}
    assert sorted(curve) == [1, 8, n] and curve[n] == result["vendi"]
    assert curve[1] == pytest.approx(1.0) and 1.0 < curve[8] <= 8.0 < curve[n] <= n
    # the oracle: the package's own embedder and vendi_score on the same texts
    texts = [r.intent for r in read_intents(out)]
    assert result["vendi"] == pytest.approx(vendi_score(TfidfEmbedder().encode(texts)))
    # bad input: a size beyond the pool, a missing file
    assert main(["vendi", str(out), "--embedding", "tfidf", "--sizes", str(n + 1)]) == 2
    assert main(["vendi", str(tmp_path / "missing.jsonl"), "--embedding", "tfidf"]) == 2
    assert main(["vendi", str(out), "--embedding", "tfidf", "--out", str(tmp_path)]) == 2  # a dir
    for bad in ({"intent": None}, {"intent": "  "}, {"seed": "x"}):
        rec = {**json.loads(out.read_text().splitlines()[0]), **bad}
        broken = tmp_path / "broken.jsonl"
        broken.write_text(json.dumps(rec) + "\n")
        assert main(["vendi", str(broken), "--embedding", "tfidf"]) == 2, bad


def test_cli_usage_errors_exit_2(tmp_path: Path) -> None:
    out = str(tmp_path / "x.jsonl")
    assert main(["intents", "-n", "0", "-o", out]) == 2
    assert main(["intents", "-n", "5", "-o", out, "--renderer", "llm"]) == 2
    assert main(["intents", "-n", "5", "-o", out, "--threshold", "1.5"]) == 2


@pytest.mark.slow
def test_minilm_embeddings_load_offline_and_catch_paraphrases() -> None:
    import torch

    torch.set_num_threads(1)
    emb = load_embedder("minilm")
    assert emb.name.startswith("all-MiniLM-L6-v2")
    x = emb.encode([
        "Please merge the three CSV exports into a single file without duplicates.",
        "Please merge the 3 CSV exports into one single file without any duplicates.",
        "Set up a nightly backup job that keeps the last seven copies.",
    ])  # fmt: skip
    assert x.shape == (3, 384) and x.dtype == np.float32
    assert np.allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    sims = x @ x.T
    assert sims[0, 1] >= 0.9 > sims[0, 2]
    records = [_record(i, t, "file_io") for i, t in enumerate(["a", "b"])]
    assert dedup_intents(records, emb)[1].embedding == emb.name
