import hashlib
import io
import zipfile
from pathlib import Path

import pytest
from clawrl.ise_synth import EmbeddingError, TfidfEmbedder, fetch_mpnet, load_embedder
from clawrl.ise_synth import embeddings as emb_mod


def _split_zip(tmp: Path, files: dict[str, bytes], parts: int) -> list[Path]:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    blob = buf.getvalue()
    size = -(-len(blob) // parts)
    paths = []
    for i in range(parts):
        p = tmp / f"m.zip.{i + 1:03d}"
        p.write_bytes(blob[i * size : (i + 1) * size])
        paths.append(p)
    return paths


def test_split_zip_assembly(tmp_path: Path) -> None:
    files = {"model/config.json": b"{}", "model/sub/w.bin": bytes(range(256)) * 40}
    parts = _split_zip(tmp_path, files, 3)
    dest = tmp_path / "out" / "model"
    dest.mkdir(parents=True)
    (dest / "stale").write_text("old")  # replaced, not merged
    assert emb_mod._assemble_split_zip(parts, dest, "model") == dest
    assert (dest / "sub/w.bin").read_bytes() == files["model/sub/w.bin"]
    assert not (dest / "stale").exists()
    with pytest.raises(EmbeddingError, match="not a zip"):
        emb_mod._assemble_split_zip(parts[1:], tmp_path / "bad", "model")
    with pytest.raises(EmbeddingError, match="no other/"):
        emb_mod._assemble_split_zip(parts, tmp_path / "x", "other")


def test_fetch_mpnet_keeps_a_verified_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    monkeypatch.setattr(emb_mod, "MPNET_SHA256", hashlib.sha256(b"weights").hexdigest())
    logs: list[str] = []
    assert fetch_mpnet(tmp_path, log=logs.append) == tmp_path  # no download
    assert "already" in logs[0]


def test_tfidf_embedder_unit_rows_and_empty_texts() -> None:
    x = TfidfEmbedder().encode(["merge csv files", "merge csv files", "", "!!!"])
    assert x.shape[0] == 4
    assert (abs((x * x).sum(axis=1) - 1) < 1e-5).all()
    assert float(x[0] @ x[1]) == pytest.approx(1.0, abs=1e-6)
    assert float(x[2] @ x[3]) == pytest.approx(0.0, abs=1e-6)  # no-term texts stay distinct


def test_unknown_embedding_kind_is_a_typed_error() -> None:
    with pytest.raises(EmbeddingError):
        load_embedder("word2vec")


def test_auto_falls_back_and_says_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CLAWRL_MPNET_DIR", str(tmp_path / "missing"))
    monkeypatch.setattr(emb_mod, "MINILM_PACKAGES", ("no_such_minilm_package",))
    emb = load_embedder("auto")
    assert emb.name.startswith("tfidf")
    assert len(emb.fallbacks) == 2
    assert "all-mpnet-base-v2" in emb.fallbacks[0] and "MiniLM" in emb.fallbacks[1]
