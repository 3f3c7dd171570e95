"""Without the ``embedded`` extra (torch, transformers) the proxy still imports and serves
other backends; asking for the embedded backend or the model kit is one MissingExtraError
naming the extra (``proxy serve``: exit 2, one line)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from clawrl.proxy import (
    BackendConfig,
    MissingExtraError,
    ModelKitError,
    ProxyStartError,
    build_default_model,
    make_backend,
)
from clawrl.proxy.cli import main as proxy_main

EXTRA = "needs the 'embedded' extra"
INSTALL = "pip install 'clawrl-proxy[embedded]'"


@pytest.fixture
def no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if torch were not installed (``None`` in ``sys.modules`` hides a module)."""
    monkeypatch.setitem(sys.modules, "torch", None)


@pytest.mark.usefixtures("no_torch")
def test_embedded_backend_without_the_extra(tmp_path: Path) -> None:
    with pytest.raises(MissingExtraError, match=rf"the embedded backend {EXTRA} \(torch not"):
        make_backend(BackendConfig(kind="embedded", model_dir=tmp_path))
    # one error both the model kit's and the serving path's handlers catch
    assert issubclass(MissingExtraError, ModelKitError)
    assert issubclass(MissingExtraError, ProxyStartError)


@pytest.mark.usefixtures("no_torch")
def test_building_the_tiny_model_without_the_extra(tmp_path: Path) -> None:
    with pytest.raises(
        MissingExtraError, match=rf"building the tiny model {EXTRA}.*{re.escape(INSTALL)}"
    ):
        build_default_model("byte", cache_dir=tmp_path)


@pytest.mark.usefixtures("no_torch")
def test_proxy_serve_exits_2_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CLAWRL_MODEL_CACHE", str(tmp_path / "cache"))
    argv = ["serve", "--socket", str(tmp_path / "m"), "--admin-socket", str(tmp_path / "a")]
    assert proxy_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"proxy serve: building the tiny model {EXTRA}")
    assert err.endswith(INSTALL) and len(err.splitlines()) == 1
