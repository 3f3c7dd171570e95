"""``make_backend`` and ``serve``: the one way programs pick a backend and serve it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from clawrl.proxy import BackendConfig, ProxyStartError, SGLangBackend, make_backend, serve
from clawrl.proxy.testing import NullBackend, ScriptedBackend


def test_make_backend_kinds(model_dir: Path) -> None:
    scripted = make_backend(BackendConfig(kind="scripted", model_dir=model_dir))
    assert isinstance(scripted, ScriptedBackend)
    sglang = make_backend(BackendConfig(kind="sglang", sglang_url="http://127.0.0.1:1"))
    assert isinstance(sglang, SGLangBackend) and sglang.base_url == "http://127.0.0.1:1"
    null = make_backend(BackendConfig(kind="null", null_completion_ids=(1, 2), vocab_size=10))
    assert isinstance(null, NullBackend)
    assert (null.vocab_size, null.max_context, null.policy_version) == (10, 32768, 0)


def test_make_backend_scripted_options(model_dir: Path) -> None:
    b = make_backend(
        BackendConfig(
            kind="scripted", model_dir=model_dir, script_default="Bye.", token_delay_s=0.5
        )
    )
    assert isinstance(b, ScriptedBackend) and b.token_delay_s == 0.5
    assert b.default is not None and b.default.text == "Bye."
    plain = make_backend(BackendConfig(kind="scripted", model_dir=model_dir))
    assert isinstance(plain, ScriptedBackend) and plain.default is not None
    assert (plain.default.text, plain.token_delay_s) == ("Done.", 0.0)


@pytest.mark.parametrize(
    ("config", "needs"),
    [
        (BackendConfig(kind="embedded"), "model_dir"),
        (BackendConfig(kind="scripted"), "model_dir"),
        (BackendConfig(kind="sglang"), "sglang_url"),
        (BackendConfig(kind="null"), "null_completion_ids"),
        (BackendConfig(kind="tpu"), "unknown backend kind"),  # type: ignore[arg-type]
    ],
)
def test_make_backend_refuses_missing_options(config: BackendConfig, needs: str) -> None:
    with pytest.raises(ValueError, match=needs):
        make_backend(config)


def test_backend_common_properties_unknown_until_start() -> None:
    b = SGLangBackend("http://127.0.0.1:1")
    from clawrl.proxy import BackendError

    with pytest.raises(BackendError, match=r"SGLangBackend\.vocab_size is unknown"):
        _ = b.vocab_size
    with pytest.raises(BackendError, match=r"SGLangBackend\.max_context is unknown"):
        _ = b.max_context


async def _one_call(endpoint_socket: Path, base_url: str, key: str) -> dict[str, object]:
    transport = httpx.AsyncHTTPTransport(uds=str(endpoint_socket))
    async with httpx.AsyncClient(transport=transport, timeout=60) as http:
        r = await http.post(
            f"{base_url}/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            headers={"Authorization": f"Bearer {key}"},
        )
    assert r.status_code == 200, r.text
    body: dict[str, object] = r.json()
    return body


@pytest.mark.parametrize("in_thread", [True, False])
async def test_serve_scripted_round_trip(model_dir: Path, tmp_path: Path, in_thread: bool) -> None:
    backend = make_backend(BackendConfig(kind="scripted", model_dir=model_dir))
    made: list[str] = []

    @contextlib.contextmanager
    def tempdir(prefix: str) -> Iterator[str]:
        with tempfile.TemporaryDirectory(prefix=prefix) as d:
            made.append(Path(d).name)
            yield d

    async with serve(
        backend,
        model_dir,
        capture_dir=tmp_path / "cap",
        in_thread=in_thread,
        tempdir=tempdir,
        tempdir_prefix="clawrl-test-px-",
    ) as endpoint:
        sock = endpoint.model_socket
        assert sock.name == "model.sock"
        assert stat.S_IMODE(os.stat(sock).st_mode) == 0o666
        assert stat.S_IMODE(os.stat(sock.with_name("admin.sock")).st_mode) == 0o600
        session = await endpoint.admin.create_session(run_id="r", task_id="t")
        assert session.openai_base_url.endswith(f"/s/{session.session_id}/v1")
        body = await _one_call(sock, session.openai_base_url, session.api_key)
        assert body["object"] == "chat.completion"
        await endpoint.admin.close_session(session.session_id)
        records = await endpoint.admin.records(session.session_id)
        assert len(records) == 1
    assert made and made[0].startswith("clawrl-test-px-")
    assert not sock.exists()
    assert (tmp_path / "cap").is_dir()


class _FailingStart(NullBackend):
    async def start(self) -> None:
        raise RuntimeError("no GPU here")


# in a thread the start-up error also ends the proxy's thread (reported by pytest)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("in_thread", [True, False])
async def test_serve_raises_proxy_start_error(model_dir: Path, in_thread: bool) -> None:
    backend = _FailingStart([1], vocab_size=300)
    with pytest.raises(ProxyStartError, match="did not start"):
        async with serve(backend, model_dir, in_thread=in_thread):
            pytest.fail("served although the backend failed to start")
    await asyncio.sleep(0)


@pytest.mark.parametrize("native", [True, False])
def test_embedded_dtype_auto_is_bf16_only_where_native(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, native: bool
) -> None:
    """``dtype="auto"`` serves bf16 where the CPU has native bf16 kernels (AVX-512 BF16,
    AMX) and fp32 elsewhere, where bf16 matmuls run over 100 times slower; an explicit
    bf16 there is kept with a warning. Revert: "auto" unknown -> ValueError."""
    torch = pytest.importorskip("torch")
    from clawrl.proxy.backends.embedded import EmbeddedBackend, bf16_is_native

    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: native)
    assert bf16_is_native("cpu") is native
    auto = make_backend(BackendConfig(kind="embedded", model_dir=model_dir, dtype="auto"))
    assert isinstance(auto, EmbeddedBackend)
    assert auto.dtype == (torch.bfloat16 if native else torch.float32)
    with caplog.at_level("WARNING"):
        bf16 = make_backend(BackendConfig(kind="embedded", model_dir=model_dir, dtype="bf16"))
    assert isinstance(bf16, EmbeddedBackend) and bf16.dtype == torch.bfloat16
    assert ("over 100 times slower" in caplog.text) is (not native)
    with pytest.raises(ValueError, match="auto"):
        make_backend(BackendConfig(kind="embedded", model_dir=model_dir, dtype="fp16"))
