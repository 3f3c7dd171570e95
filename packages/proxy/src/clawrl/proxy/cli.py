"""``proxy`` command line.

    proxy serve --model DIR|default --backend embedded|sglang|scripted|null
                [--sglang-url URL | --launch-sglang] --socket PATH [--port N]
                (--admin-socket PATH | --admin-port N) [--capture-dir DIR]

    proxy model list [--json]
    proxy model fetch NAME [--refetch] [--cache-dir DIR]
    proxy model fetch --model-dir DIR        (same as: proxy model check DIR)
    proxy model check DIR

``--model default`` serves the kit's tiny model (``build_default_model()``, tokenizer chosen
with ``--tokenizer``); ``--model NAME`` a real model of the kit (``proxy model list``), fetched
on first use. Exit codes: 0 after SIGINT/SIGTERM, 2 for bad arguments. ``proxy model``: 0 on
success (the model directory on stdout for ``fetch``), 1 when a model cannot be fetched or a
directory is not usable (the reason on stderr).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clawrl.proxy.backends.base import InferenceBackend
from clawrl.proxy.serving import BackendConfig, check_embedded_options, make_backend

if TYPE_CHECKING:
    from clawrl.proxy.render import ChatRenderer

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="proxy", description="clawrl serving proxy")
    sub = p.add_subparsers(dest="command", required=True)
    _add_serve_parser(sub)
    _add_model_parser(sub)
    return p


def _add_serve_parser(sub: Any) -> None:
    """``proxy serve``: the model, the backend, the listening addresses and capture."""
    s = sub.add_parser("serve", help="serve the model API and the admin API")
    s.add_argument(
        "--model",
        default="default",
        help="HF model directory, 'default', or a known real model ('proxy model list')",
    )
    s.add_argument(
        "--tokenizer",
        choices=["byte", "qwen3"],
        default="byte",
        help="tokenizer of the default model",
    )
    s.add_argument(
        "--backend", choices=["embedded", "sglang", "scripted", "null"], default="embedded"
    )
    g = s.add_mutually_exclusive_group()
    g.add_argument("--sglang-url", help="URL of a running SGLang server")
    g.add_argument("--launch-sglang", action="store_true", help="start SGLang for --model")
    s.add_argument("--sglang-python", help="interpreter of the SGLang environment")
    s.add_argument("--socket", help="unix socket of the model API")
    s.add_argument("--port", type=int, help="TCP port of the model API")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--admin-socket", help="unix socket of the admin API")
    s.add_argument("--admin-port", type=int, help="TCP port of the admin API")
    s.add_argument(
        "--admin-token",
        default=os.environ.get("CLAWRL_PROXY_ADMIN_TOKEN") or None,
        help="bearer token required by the admin API (default: $CLAWRL_PROXY_ADMIN_TOKEN)",
    )
    s.add_argument("--capture-dir", help="root of the call-record files")
    s.add_argument("--public-base-url", help="base URL harnesses use (default: forwarder address)")
    s.add_argument("--served-model-name", default="clawrl")
    s.add_argument("--max-body-mb", type=float, default=32.0)
    s.add_argument(
        "--script-default",
        default="Done.",
        help="scripted backend: completion when a session's script is empty",
    )
    s.add_argument(
        "--token-delay", type=float, default=0.0, help="scripted backend: seconds between tokens"
    )
    s.add_argument("--device", default="cpu", help="embedded backend: torch device")
    s.add_argument(
        "--dtype",
        default="fp32",
        help="embedded backend: fp32 (exact logprobs), bf16 (faster on GPUs and on CPUs with "
        "AVX-512 BF16 or AMX, far slower on others) or auto (bf16 where native, else fp32)",
    )
    s.add_argument(
        "--threads",
        type=int,
        default=0,
        help="embedded backend: torch threads (default 0: every core this process may use; "
        "one for a model under 50M parameters)",
    )
    s.add_argument(
        "--prefix-cache-mib",
        type=float,
        default=256.0,
        help="embedded backend: MiB of prompt KV shared across sessions (0: off)",
    )
    s.add_argument(
        "--null-tokens",
        type=int,
        default=64,
        help="null backend (benchmark fixture): completion length in tokens",
    )
    s.add_argument(
        "--keepalive",
        type=float,
        default=10.0,
        help="seconds before a still-generating streamed call gets SSE keep-alive comments",
    )
    s.add_argument(
        "--default-max-tokens",
        type=int,
        default=None,
        help="completion cap of requests without max_tokens (default: the room left in the "
        "context window)",
    )
    s.add_argument(
        "--max-context",
        type=int,
        default=None,
        help="most tokens per call (prompt + completion), below the model's own limit: longer "
        "calls get the context-length error (default: the model's limit)",
    )
    s.add_argument(
        "--workers",
        type=int,
        default=1,
        help="proxy worker processes behind the one address (sessions sticky to a worker)",
    )
    s.add_argument(
        "--max-connections-per-sandbox",
        type=int,
        default=64,
        help="open connections one sandbox may hold on the model socket (0: no cap)",
    )
    s.add_argument(
        "--max-calls-per-session",
        type=int,
        default=32,
        help="calls of one session in flight; more get HTTP 429 (0: no cap)",
    )
    s.add_argument(
        "--head-timeout",
        type=float,
        default=10.0,
        help="seconds a connection has to send a complete request head (0: none)",
    )
    s.add_argument(
        "--body-timeout",
        type=float,
        default=60.0,
        help="seconds from a request head to its complete body (0: none)",
    )
    s.add_argument("--worker-index", type=int, default=None, help=argparse.SUPPRESS)
    s.add_argument("--log-level", default="warning")


def _add_model_parser(sub: Any) -> None:
    """``proxy model list | fetch | check``."""
    m = sub.add_parser("model", help="real models of the model kit: list, fetch, check")
    msub = m.add_subparsers(dest="model_command", required=True)
    ml = msub.add_parser("list", help="known models and whether each is cached")
    ml.add_argument("--json", action="store_true", help="one JSON object per line")
    mf = msub.add_parser("fetch", help="download, verify and convert a known model")
    mf.add_argument("name", nargs="?", help="a known model (see 'proxy model list')")
    mf.add_argument("--model-dir", help="validate an HF directory you already have instead")
    mf.add_argument("--refetch", action="store_true", help="fetch again even if cached")
    mc = msub.add_parser("check", help="validate an HF causal-LM directory")
    mc.add_argument("model_dir")
    for q in (ml, mf, mc):
        q.add_argument(
            "--cache-dir",
            help="cache root (default: $CLAWRL_MODEL_CACHE, else ~/.cache/clawrl/models)",
        )
        q.add_argument("--log-level", default="info")


def _model_command(args: argparse.Namespace) -> int:
    import json

    from clawrl.proxy.model_fetch import check_model_dir, fetch_model, list_models
    from clawrl.proxy.model_kit import ModelKitError

    try:
        if args.model_command == "list":
            rows = list_models(args.cache_dir)
            if args.json:
                for row in rows:
                    print(json.dumps(row, sort_keys=True))
                return 0
            for row in rows:
                state = f"cached at {row['path']}" if row["cached"] else "not cached"
                print(
                    f"{row['name']:30} {row['architecture']:6} {row['parameters']:>5} "
                    f"{row['bytes'] / 1e6:6.1f} MB  {row['license']:10} {row['packages']}  "
                    f"[{state}]"
                )
            return 0
        model_dir = args.model_dir
        if args.model_command == "fetch" and (args.name is None) == (model_dir is None):
            print("proxy model fetch: give a model NAME or --model-dir DIR", file=sys.stderr)
            return 2
        if model_dir is not None:
            info = check_model_dir(model_dir)
            print(json.dumps(info, indent=2, sort_keys=True), file=sys.stderr)
            print(info["path"])
            return 0
        print(fetch_model(args.name, cache_dir=args.cache_dir, refetch=args.refetch))
        return 0
    except ModelKitError as exc:
        print(f"proxy model {args.model_command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _model_dir(args: argparse.Namespace) -> Path:
    """The model directory ``--model`` names (the default tiny model built, a known model
    fetched).

    Raises:
        ModelKitError: not a servable HF directory, 'default' nor a known model (the
            message names --model), or the model cannot be built / fetched.
    """
    if args.model == "default":
        from clawrl.proxy.model_kit import build_default_model

        return Path(build_default_model(args.tokenizer))
    from clawrl.proxy.model_check import check_model_dir
    from clawrl.proxy.model_fetch import KNOWN_MODELS, fetch_model, known_model
    from clawrl.proxy.model_kit import ModelKitError

    path = Path(args.model)
    if known_model(args.model) is not None and not path.is_dir():
        return fetch_model(args.model)
    if not path.is_dir():
        raise ModelKitError(
            f"--model {args.model}: not a directory, 'default', nor a known model (one of: "
            f"{', '.join(sorted(KNOWN_MODELS))})"
        )
    try:
        check_model_dir(path)
    except ModelKitError as exc:
        raise ModelKitError(f"--model {args.model}: {exc}") from None
    return path


_EMBEDDED_FLAGS = {
    "dtype": "--dtype",
    "num_threads": "--threads",
    "prefix_cache_mib": "--prefix-cache-mib",
}


def _backend(
    args: argparse.Namespace,
    model_dir: Path,
    renderer: ChatRenderer,
    cleanup: list[Callable[[], None]],
) -> InferenceBackend:
    url = args.sglang_url
    if args.backend == "sglang" and args.launch_sglang:
        from clawrl.proxy.sglang_launcher import launch_sglang

        server = launch_sglang(model_dir, python=args.sglang_python)
        cleanup.append(server.stop)
        url = server.url
    if args.backend == "sglang" and not url:
        raise SystemExit("proxy serve: --backend sglang needs --sglang-url or --launch-sglang")
    null_ids: tuple[int, ...] = ()
    if args.backend == "null":
        ids = (renderer.encode("a") * max(0, args.null_tokens - 1))[: args.null_tokens - 1]
        null_ids = (*ids, renderer.stop_token_ids[0])
    config = BackendConfig(
        kind=args.backend,
        model_dir=model_dir,
        device=args.device,
        dtype=args.dtype,
        num_threads=args.threads,
        prefix_cache_mib=args.prefix_cache_mib,
        sglang_url=url or "",
        script_default=args.script_default,
        token_delay_s=args.token_delay,
        null_completion_ids=null_ids,
        vocab_size=renderer.vocab_size,
    )
    return make_backend(config)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    if args.command == "model":
        return _model_command(args)
    from clawrl.proxy.render import ChatRenderer
    from clawrl.proxy.server import ProxyServer, ServerConfig, build_proxy_app

    if args.socket is None and args.port is None:
        print("proxy serve: give --socket and/or --port", file=sys.stderr)
        return 2
    if args.admin_socket is None and args.admin_port is None:
        print("proxy serve: give --admin-socket and/or --admin-port", file=sys.stderr)
        return 2
    try:
        check_embedded_options(
            BackendConfig(
                dtype=args.dtype, num_threads=args.threads, prefix_cache_mib=args.prefix_cache_mib
            )
        )
    except ValueError as exc:
        msg = str(exc)
        for key, flag in _EMBEDDED_FLAGS.items():
            if msg.startswith(key):
                msg = flag + msg[len(key) :]
        print(f"proxy serve: {msg}", file=sys.stderr)
        return 2
    if args.max_context is not None and args.max_context < 2:
        print(f"proxy serve: --max-context must be >= 2, got {args.max_context}", file=sys.stderr)
        return 2
    if args.workers > 1:
        if args.launch_sglang:
            print("proxy serve: --workers needs --sglang-url (one server for all)", file=sys.stderr)
            return 2
        from clawrl.proxy.workers import serve_workers

        raw = list(sys.argv[1:] if argv is None else argv)
        return serve_workers(args, raw[raw.index("serve") + 1 :])
    if args.workers < 1:
        print("proxy serve: --workers must be >= 1", file=sys.stderr)
        return 2
    for flag, value in (
        ("--max-connections-per-sandbox", args.max_connections_per_sandbox),
        ("--max-calls-per-session", args.max_calls_per_session),
        ("--head-timeout", args.head_timeout),
        ("--body-timeout", args.body_timeout),
    ):
        if not value >= 0:
            print(f"proxy serve: {flag} must be >= 0 (0: no limit), got {value}", file=sys.stderr)
            return 2
    from clawrl.proxy.extras import MissingExtraError
    from clawrl.proxy.model_kit import ModelKitError

    try:
        model_dir = _model_dir(args)
        renderer = ChatRenderer.from_model_dir(model_dir)
    except ModelKitError as exc:  # MissingExtraError included
        print(f"proxy serve: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    cleanup: list[Callable[[], None]] = []
    try:
        try:
            backend = _backend(args, model_dir, renderer, cleanup)
        except MissingExtraError as exc:
            print(f"proxy serve: {exc}", file=sys.stderr)
            return 2
        config = ServerConfig(
            socket=args.socket,
            port=args.port,
            host=args.host,
            admin_socket=args.admin_socket,
            admin_port=args.admin_port,
            admin_token=args.admin_token,
            capture_dir=args.capture_dir,
            public_base_url=args.public_base_url,
            served_model=args.served_model_name,
            max_body_bytes=int(args.max_body_mb * (1 << 20)),
            keepalive_s=args.keepalive,
            default_max_tokens=args.default_max_tokens,
            max_context=args.max_context,
            log_level=args.log_level,
            worker_index=args.worker_index,
            max_connections_per_peer=args.max_connections_per_sandbox,
            max_calls_per_session=args.max_calls_per_session,
            head_timeout_s=args.head_timeout,
            body_timeout_s=args.body_timeout,
        )
        server = ProxyServer(build_proxy_app(renderer, backend, config), config)
        print(
            f"proxy: serving {model_dir} with the {backend.name} backend on "
            f"{args.socket or ''} {args.port or ''} (admin {args.admin_socket or args.admin_port})",
            file=sys.stderr,
            flush=True,
        )
        server.run()
    finally:
        for fn in cleanup:
            fn()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
