"""The one way to serve a backend from a program: :func:`make_backend` picks the backend,
:func:`serve` runs the proxy (model API + admin API on unix sockets) around it.

bench, the RL loop and ise-synth all serve through these two; ``proxy serve`` (the CLI) is
the out-of-process way.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from clawrl.proxy.backends.base import InferenceBackend
from clawrl.proxy.client import AsyncAdminClient
from clawrl.proxy.errors import ProxyError
from clawrl.proxy.render import ChatRenderer
from clawrl.proxy.server import ProxyServer, ServerConfig, build_proxy_app

__all__ = [
    "BackendConfig",
    "ModelEndpoint",
    "ProxyStartError",
    "make_backend",
    "serve",
]

BackendKind = Literal["embedded", "sglang", "scripted", "null"]
TempDirFactory = Callable[[str], AbstractContextManager[str]]


class ProxyStartError(ProxyError, RuntimeError):
    """The proxy (or the backend it starts) did not come up."""


@dataclass(frozen=True)
class BackendConfig:
    """Which inference backend serves the model, and its options.

    kind: ``embedded`` (transformers in this process), ``sglang`` (an SGLang server at
        ``sglang_url``), ``scripted`` (the test backend replaying scripted completions) or
        ``null`` (the benchmark fixture returning ``null_completion_ids`` at once).
    model_dir: the HF model directory (embedded and scripted load it; sglang and null
        ignore it).
    device, max_batch_size, seed, policy_version: the embedded backend's torch device,
        concurrent generations, sampling seed and initial policy version.
    dtype: the embedded backend's weights and KV: ``fp32`` (exact logprobs), ``bf16``
        (bfloat16 matmuls on AMX / tensor cores, half the memory traffic and KV bytes) or
        ``auto`` (bf16 where the device has native bf16 kernels, else fp32).
    num_threads: the embedded backend's torch threads (0: follow the machine, every core
        this process may run on; one for a tiny test model).
    prefix_cache_mib: MiB of KV the embedded backend keeps for prompts that start the same
        way, across sessions (0: off; dropped at every weight update).
    sglang_url: the running SGLang server (``http(s)://host:port``), or with
        ``sglang_router`` an sglang-router in front of several (``SGLangRouterBackend``;
        its workers ``sglang_worker_urls``, or the router's own list when empty).
    script_default, token_delay_s: the scripted backend's completion for a session whose
        script is empty (default ``"Done."``) and its delay between streamed tokens.
    null_completion_ids, vocab_size: the null backend's fixed completion and vocabulary.
    """

    kind: BackendKind = "embedded"
    model_dir: str | Path = ""
    device: str = "cpu"
    max_batch_size: int = 8
    seed: int | None = None
    policy_version: int = 0
    dtype: str = "fp32"
    num_threads: int = 0
    prefix_cache_mib: float = 256.0
    sglang_url: str = ""
    sglang_router: bool = False
    sglang_worker_urls: tuple[str, ...] = ()
    script_default: str | None = None
    token_delay_s: float = 0.0
    null_completion_ids: tuple[int, ...] = ()
    vocab_size: int = 0


EMBEDDED_DTYPES = ("fp32", "bf16", "auto")


def check_embedded_options(config: BackendConfig) -> None:
    """Raise ``ValueError`` (one line) for an embedded option out of range."""
    if config.dtype not in EMBEDDED_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(EMBEDDED_DTYPES)}, got {config.dtype!r}")
    if isinstance(config.num_threads, bool) or not isinstance(config.num_threads, int):
        raise ValueError(f"num_threads must be an integer, got {config.num_threads!r}")
    if config.num_threads < 0:
        raise ValueError(
            f"num_threads must be >= 1 (0: follow the machine), got {config.num_threads}"
        )
    if not config.prefix_cache_mib >= 0:
        raise ValueError(f"prefix_cache_mib must be >= 0 (0: off), got {config.prefix_cache_mib}")


def make_backend(config: BackendConfig) -> InferenceBackend:
    """The (not yet started) backend ``config`` describes; :func:`serve` starts it.

    Raises:
        ValueError: ``kind`` is unknown, an option it needs is missing (``model_dir`` for
            embedded / scripted, ``sglang_url`` for sglang, ``null_completion_ids`` and
            ``vocab_size`` for null), or an embedded option is out of range (one line).
        MissingExtraError: ``embedded`` without the ``[embedded]`` extra (torch,
            transformers) installed.
    """
    kind = config.kind
    check_embedded_options(config)
    if kind in ("embedded", "scripted") and not str(config.model_dir):
        raise ValueError(f"backend kind {kind!r} needs model_dir")
    if kind == "embedded":
        from clawrl.proxy.extras import require_extra

        require_extra("the embedded backend")
        from clawrl.proxy.backends.embedded import EmbeddedBackend

        return EmbeddedBackend(
            config.model_dir,
            device=config.device,
            max_batch_size=config.max_batch_size,
            seed=config.seed,
            policy_version=config.policy_version,
            dtype=config.dtype,
            num_threads=config.num_threads or "auto",
            prefix_cache_bytes=int(config.prefix_cache_mib * 2**20),
        )
    if kind == "scripted":
        from clawrl.proxy.backends.scripted import ScriptedBackend, ScriptedCompletion

        kw: dict[str, object] = {"token_delay_s": config.token_delay_s}
        if config.script_default is not None:
            kw["default"] = ScriptedCompletion(text=config.script_default)
        return ScriptedBackend.from_model_dir(config.model_dir, **kw)
    if kind == "sglang":
        if not config.sglang_url:
            raise ValueError("backend kind 'sglang' needs sglang_url")
        if config.sglang_router:
            from clawrl.proxy.backends.sglang_router import SGLangRouterBackend

            return SGLangRouterBackend(
                config.sglang_url,
                list(config.sglang_worker_urls) or None,
                initial_policy_version=config.policy_version,
            )
        from clawrl.proxy.backends.sglang import SGLangBackend

        return SGLangBackend(config.sglang_url, initial_policy_version=config.policy_version)
    if kind == "null":
        if not config.null_completion_ids or config.vocab_size <= 0:
            raise ValueError("backend kind 'null' needs null_completion_ids and vocab_size")
        from clawrl.proxy.backends.null import NullBackend

        return NullBackend(config.null_completion_ids, vocab_size=config.vocab_size)
    raise ValueError(f"unknown backend kind {kind!r} (embedded | sglang | scripted | null)")


@dataclass(frozen=True)
class ModelEndpoint:
    """A running proxy: its admin client and the host path of its model-API unix socket
    (mounted into every sandbox that needs the model). Session URLs come from the
    :class:`~clawrl.proxy.SessionInfo` that ``admin.create_session`` returns."""

    admin: AsyncAdminClient
    model_socket: Path


@contextlib.contextmanager
def _dirs(
    socket_dir: Path | str | None,
    capture_dir: Path | str | None,
    tempdir: TempDirFactory,
    prefix: str,
) -> Iterator[tuple[Path, Path]]:
    with contextlib.ExitStack() as stack:
        sock_root = Path(socket_dir or stack.enter_context(tempdir(prefix)))
        cap = Path(capture_dir or stack.enter_context(tempdir("clawrl-cap-")))
        yield sock_root, cap


def _default_tempdir(prefix: str) -> AbstractContextManager[str]:
    return tempfile.TemporaryDirectory(prefix=prefix)


async def _start_here(server: ProxyServer, timeout_s: float) -> asyncio.Future[None]:
    serving = asyncio.ensure_future(server.serve())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not server.started.is_set():
        if serving.done():
            try:
                serving.result()
            except Exception as exc:
                raise ProxyStartError(f"the proxy did not start: {exc}") from exc
            raise ProxyStartError("the proxy stopped during start-up")
        if loop.time() > deadline:
            serving.cancel()
            raise ProxyStartError(f"the proxy did not listen within {timeout_s:g} s")
        await asyncio.sleep(0.02)
    return serving


@contextlib.asynccontextmanager
async def serve(
    backend: InferenceBackend,
    model_dir: Path | str,
    *,
    capture_dir: Path | str | None = None,
    socket_dir: Path | str | None = None,
    in_thread: bool = True,
    start_timeout_s: float = 300.0,
    tempdir: TempDirFactory | None = None,
    tempdir_prefix: str = "clawrl-px-",
    max_context: int | None = None,
) -> AsyncIterator[ModelEndpoint]:
    """Serve ``backend`` behind a clawrl proxy for the duration of the ``async with``.

    The model API listens on ``<socket_dir>/model.sock`` (mode 0666, for sandboxes) and the
    admin API on ``admin.sock`` (mode 0600); call records go to ``capture_dir``. Both
    default to fresh temporary directories made by ``tempdir(prefix)`` (default
    ``tempfile.TemporaryDirectory``; pass ``clawrl.sandbox.owned_tempdir`` so that
    ``gc_tempdirs`` reclaims them after a crash). The backend is started and closed with the
    server. ``model_dir`` provides the chat template and tokenizer.

    ``in_thread`` (default): the proxy runs in a daemon thread with its own event loop, so
    model serving never waits on the caller's work, nor the caller on a long prefill. With
    ``in_thread=False`` it runs in the caller's loop (the RL loop, whose embedded backend
    syncs weights in-process).

    ``max_context``: most tokens per call (prompt + completion) when below the backend's own
    limit; a longer call gets the typed context-length error (a trainer passes what it can
    train on in one forward).

    Yields:
        ModelEndpoint: the admin client (closed on exit) and the model socket path.

    Raises:
        ProxyStartError: the proxy or its backend failed to start, or did not listen within
            ``start_timeout_s``.
    """
    with _dirs(socket_dir, capture_dir, tempdir or _default_tempdir, tempdir_prefix) as (
        sock_root,
        cap,
    ):
        config = ServerConfig(
            socket=str(sock_root / "model.sock"),
            admin_socket=str(sock_root / "admin.sock"),
            capture_dir=str(cap),
            max_context=max_context,
        )
        renderer = await asyncio.to_thread(ChatRenderer.from_model_dir, Path(model_dir))
        server = ProxyServer(build_proxy_app(renderer, backend, config), config)
        serving: asyncio.Future[None] | None = None
        if in_thread:
            try:
                await asyncio.to_thread(server.start_in_thread, start_timeout_s)
            except (RuntimeError, TimeoutError) as exc:
                raise ProxyStartError(f"the proxy did not start: {exc}") from exc
        else:
            serving = await _start_here(server, start_timeout_s)
        admin = AsyncAdminClient(socket=config.admin_socket)
        try:
            yield ModelEndpoint(admin=admin, model_socket=Path(config.socket or ""))
        finally:
            await admin.close()
            if serving is None:
                await asyncio.to_thread(server.stop_thread)
            else:
                server.stop()
                with contextlib.suppress(asyncio.CancelledError):
                    await serving
