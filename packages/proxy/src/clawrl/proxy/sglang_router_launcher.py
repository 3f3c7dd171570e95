"""Start the PyPI ``sglang-router`` (SGLang's Rust load balancer) in front of SGLang
workers, or N workers and a router together.

The router lives in the SGLang environment (``tools/sglang/install.sh`` installs
``sglang-router==0.3.2`` next to ``sglang==0.5.23``) and takes the flags of
``python -m sglang_router.launch_router``. What 0.3.2 does, tried against two real CPU
workers (``docs/sglang.md`` has the details):

- ``/generate`` goes to one worker chosen by ``--policy``. ``manual`` (this launcher's
  default, with ``--assignment-mode min_group``) keeps every request carrying the same
  ``X-SMG-Routing-Key`` header on one worker and spreads new keys over the workers;
  :class:`~clawrl.proxy.backends.sglang_router.SGLangRouterBackend` sends the session id
  there, so a session is sticky to the worker holding its prefix cache. ``cache_aware``
  (the router's own default) sent every call, of every session, to the same worker while
  the load was balanced (its spill-over needs a load gap of 64 requests); ``round_robin``
  alternates calls, sessions included.
- ``/flush_cache`` is broadcast to every worker; there is *no* route for
  ``/update_weights_from_disk``, ``/pause_generation``, ``/continue_generation`` or
  ``/abort_request`` (404): the backend calls each worker for those.
- ``GET /workers`` lists the workers (``id``, ``url``, ``is_healthy``, ``load``);
  ``DELETE /workers/{id}`` removes one (202, done in the background); ``/readiness``
  answers 200 while a healthy worker is registered; a request with no worker left gets
  503 ``no_available_workers``.
- Results carry no header naming the worker: the backend tags each worker's SGLang weight
  version instead.

Example::

    from clawrl.proxy import SGLangRouterBackend, launch_sglang_cluster

    with launch_sglang_cluster("/path/to/hf_model_dir", n_workers=2) as cluster:
        backend = SGLangRouterBackend(cluster.url, cluster.worker_urls)
        ...
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from clawrl.proxy.sglang_launcher import (
    SGLangLaunchError,
    SGLangServer,
    _free_port,
    _start,
    default_sglang_env,
    launch_sglang,
)

__all__ = [
    "DEFAULT_SGLANG_ROUTER_VERSION",
    "RouterPolicy",
    "SGLangCluster",
    "launch_sglang_cluster",
    "launch_sglang_router",
]

DEFAULT_SGLANG_ROUTER_VERSION = "0.3.2"

RouterPolicy = Literal["manual", "cache_aware", "round_robin", "random", "power_of_two"]


#: Starts the Rust router through its Python binding (``RouterArgs`` parses the same flags
#: as ``python -m sglang_router.launch_router``; ``Router.from_args(...).start()`` serves).
#: ``launch_router`` itself also imports the Python debugging balancer, which imports
#: sglang and torch: over a minute on a busy 2-core machine, against ~1 s this way.
ROUTER_MAIN = (
    "import argparse, sys\n"
    "from sglang_router.router import Router\n"
    "from sglang_router.router_args import RouterArgs\n"
    "parser = argparse.ArgumentParser(prog='sglang-router')\n"
    "RouterArgs.add_cli_args(parser)\n"
    "Router.from_args(RouterArgs.from_cli_args(parser.parse_args(sys.argv[1:]))).start()\n"
)


def _router_command(
    py: Path,
    worker_urls: Sequence[str],
    host: str,
    port: int,
    policy: str,
    health_check_interval_s: int,
    extra_args: Sequence[str],
) -> list[str]:
    cmd = [str(py), "-c", ROUTER_MAIN, "--worker-urls", *worker_urls]
    cmd += ["--host", host, "--port", str(port), "--policy", policy]
    if policy == "manual":  # a new routing key (session) goes to the worker with fewest
        cmd += ["--assignment-mode", "min_group"]
    # a worker that stops answering /health is marked unhealthy after one failed check
    cmd += ["--health-check-interval-secs", str(health_check_interval_s)]
    cmd += ["--health-failure-threshold", "1", "--health-check-timeout-secs", "5"]
    cmd += ["--worker-startup-check-interval", "1", "--log-level", "info"]
    # its Prometheus exporter defaults to port 29000: a second router would panic on it
    cmd += ["--prometheus-host", host, "--prometheus-port", str(_free_port(host))]
    return cmd + list(extra_args)


def launch_sglang_router(
    worker_urls: Sequence[str],
    *,
    python: str | os.PathLike[str] | None = None,
    host: str = "127.0.0.1",
    port: int | None = None,
    policy: RouterPolicy = "manual",
    health_check_interval_s: int = 2,
    extra_args: Sequence[str] = (),
    log_path: str | os.PathLike[str] | None = None,
    startup_timeout_s: float = 300.0,
    progress: bool = False,
    die_with_parent: bool = True,
    niceness: int = 0,
) -> SGLangServer:
    """Start the sglang-router (:data:`ROUTER_MAIN`) over running workers and wait until its
    ``/readiness`` answers 200 (a healthy worker is registered).

    Args:
        worker_urls: the SGLang workers' root URLs (at least one), already healthy.
        python: the SGLang environment's interpreter (default
            ``<default_sglang_env()>/bin/python``; the router package must be installed
            there: ``bash tools/sglang/install.sh``).
        host, port: where the router listens (port None: a free port).
        policy: the router's ``--policy`` (see the module docstring; ``manual`` also passes
            ``--assignment-mode min_group``).
        health_check_interval_s: seconds between the router's own worker health checks
            (a worker is marked unhealthy after one failure).
        extra_args: more router flags, appended last.
        log_path, startup_timeout_s, progress, die_with_parent, niceness: as for
            :func:`~clawrl.proxy.sglang_launcher.launch_sglang`.

    Returns:
        The running router as an :class:`~clawrl.proxy.sglang_launcher.SGLangServer`.

    Raises:
        ValueError: no worker URL, or one that is not http(s).
        SGLangLaunchError: no interpreter or router package, the router exited, or it was
            not ready within ``startup_timeout_s`` (the log tail is in the message).
    """
    urls = [u.rstrip("/") for u in worker_urls]
    if not urls:
        raise ValueError("launch_sglang_router needs at least one worker URL")
    for u in urls:
        if not u.startswith(("http://", "https://")):
            raise ValueError(f"worker URL must be http(s), got {u!r}")
    py = Path(python) if python is not None else default_sglang_env() / "bin" / "python"
    if not py.exists():
        raise SGLangLaunchError(
            f"no SGLang interpreter at {py}: run `bash tools/sglang/install.sh` "
            "(or pass python=...)"
        )

    def command(at: int) -> tuple[list[str], dict[str, str]]:
        cmd = _router_command(py, urls, host, at, policy, health_check_interval_s, extra_args)
        return cmd, dict(os.environ)

    # a lost port (its own, or the Prometheus exporter's, always chosen here) is chosen again
    server = _start(command, host, port, log_path, die_with_parent, niceness, True)
    server.wait_healthy(startup_timeout_s, progress=progress, route="/readiness")
    return server


@dataclass
class SGLangCluster:
    """N SGLang workers behind one sglang-router, started by
    :func:`launch_sglang_cluster`.

    Attributes:
        router: the router process (its ``url`` is where generations go).
        workers: the worker processes, in order.
    """

    router: SGLangServer
    workers: list[SGLangServer]

    @property
    def url(self) -> str:
        """The router's root URL."""
        return self.router.url

    @property
    def worker_urls(self) -> list[str]:
        """The workers' root URLs, in order."""
        return [w.url for w in self.workers]

    def stop(self) -> None:
        """Stop the router, then every worker (idempotent)."""
        self.router.stop(grace_s=5.0)
        for w in self.workers:
            w.stop()

    def __enter__(self) -> SGLangCluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def launch_sglang_cluster(
    model_dir: str | os.PathLike[str],
    n_workers: int = 2,
    *,
    python: str | os.PathLike[str] | None = None,
    host: str = "127.0.0.1",
    device: Literal["auto", "cpu", "cuda"] = "auto",
    dtype: str | None = None,
    policy: RouterPolicy = "manual",
    worker_args: Sequence[str] = (),
    router_args: Sequence[str] = (),
    log_dir: str | os.PathLike[str] | None = None,
    startup_timeout_s: float = 900.0,
    niceness: int = 0,
) -> SGLangCluster:
    """Start ``n_workers`` SGLang servers for ``model_dir`` (all spawned at once, then
    waited for), then a router over them.

    Args:
        model_dir, python, host, device, dtype: as for
            :func:`~clawrl.proxy.sglang_launcher.launch_sglang` (each worker on a free port).
        n_workers: how many workers (>= 1).
        policy: the router's ``--policy``.
        worker_args, router_args: extra flags for every worker / for the router.
        log_dir: folder for ``worker-<i>.log`` and ``router.log`` (default: temporary files).
        startup_timeout_s: for each worker's ``/health``.
        niceness: added to every process's nice value.

    Returns:
        The running :class:`SGLangCluster` (a context manager; ``stop()`` ends all).

    Raises:
        ValueError: ``n_workers < 1``.
        SGLangLaunchError: a worker or the router did not come up (all are stopped).
    """
    if n_workers < 1:
        raise ValueError(f"n_workers must be >= 1, got {n_workers}")
    logs = Path(log_dir) if log_dir is not None else None
    workers: list[SGLangServer] = []
    try:
        for i in range(n_workers):
            workers.append(
                launch_sglang(
                    model_dir,
                    python=python,
                    host=host,
                    device=device,
                    dtype=dtype,
                    extra_args=worker_args,
                    log_path=None if logs is None else logs / f"worker-{i}.log",
                    niceness=niceness,
                    wait=False,
                )
            )
        for w in workers:
            w.wait_healthy(startup_timeout_s)
        router = launch_sglang_router(
            [w.url for w in workers],
            python=python,
            host=host,
            policy=policy,
            extra_args=router_args,
            log_path=None if logs is None else logs / "router.log",
            niceness=niceness,
        )
    except BaseException:
        for w in workers:
            with contextlib.suppress(Exception):
                w.stop(grace_s=5.0)
        raise
    return SGLangCluster(router=router, workers=workers)
