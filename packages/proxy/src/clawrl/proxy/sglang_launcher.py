"""Start an SGLang server from a given Python environment, as a subprocess.

SGLang is not a dependency of clawrl-proxy (it pins its own torch and brings ~10 GB): it
lives in its own environment — ``bash tools/sglang/install.sh`` builds one at
``~/.cache/clawrl/sglang-0.5.23/`` — and runs as a separate process that
:class:`~clawrl.proxy.backends.sglang.SGLangBackend` talks to over HTTP.

Example::

    from clawrl.proxy import SGLangBackend, launch_sglang

    with launch_sglang("/path/to/hf_model_dir") as server:  # waits for /health
        backend = SGLangBackend(server.url)
        ...

On a machine without a GPU (``device="cpu"``, the default when no NVIDIA driver is found)
the launcher applies what ``../shared/ENVIRONMENT.md`` records as needed for SGLang 0.5.23:
``SGLANG_USE_CPU_ENGINE=1``, the stub ``libcuda.so.1`` the installer builds in
``<env>/clawrl-stub/`` on ``LD_LIBRARY_PATH``, and ``--device cpu --attention-backend
torch_native --max-total-tokens 8192 --skip-server-warmup``. Start-up takes 3–5 minutes
on 2 CPU cores (imports) and ~3.6 GB of RAM.

The server runs in its own process group; :meth:`SGLangServer.stop` (also called by the
context manager, by a ``weakref`` finaliser and at interpreter exit) terminates the whole
group — SGLang forks a scheduler and a detokenizer — and kills it after a grace period.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import httpx

__all__ = [
    "DEFAULT_SGLANG_VERSION",
    "SGLangLaunchError",
    "SGLangServer",
    "default_sglang_env",
    "launch_sglang",
]

DEFAULT_SGLANG_VERSION = "0.5.23"

#: flags that make SGLang 0.5.23 serve on a CPU-only machine (ENVIRONMENT.md)
CPU_ARGS: tuple[str, ...] = (
    "--device",
    "cpu",
    "--attention-backend",
    "torch_native",
    "--max-total-tokens",
    "8192",
    "--skip-server-warmup",
)


class SGLangLaunchError(RuntimeError):
    """SGLang could not be started: no interpreter, the process exited, or /health never
    answered in time. The message ends with the tail of the server's log."""


def default_sglang_env(version: str = DEFAULT_SGLANG_VERSION) -> Path:
    """The environment ``tools/sglang/install.sh`` creates: ``$CLAWRL_SGLANG_ENV`` or
    ``~/.cache/clawrl/sglang-<version>``."""
    env = os.environ.get("CLAWRL_SGLANG_ENV")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "clawrl" / f"sglang-{version}"


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def _set_parent_death_signal() -> None:  # runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        # PR_SET_PDEATHSIG = 1. SIGKILL, not SIGTERM: SGLang's launch_server was seen to
        # outlive a SIGTERM on CPU; its scheduler children die with it (they set their own).
        libc.prctl(1, signal.SIGKILL)


def _has_nvidia_gpu() -> bool:
    return Path("/dev/nvidiactl").exists() or shutil.which("nvidia-smi") is not None


def _kill_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the process group of ``proc``, then SIGKILL it after ``grace_s``."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
    # children (scheduler, detokenizer) may outlive the parent: kill whatever is left
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


@dataclass
class SGLangServer:
    """A running SGLang server started by :func:`launch_sglang`.

    Attributes:
        url: base URL, e.g. ``http://127.0.0.1:30000``.
        process: the ``sglang.launch_server`` process (leader of its own process group).
        log_path: the file receiving the server's stdout and stderr.
        command: the argv it was started with.
        startup_s: seconds from spawn until ``/health`` answered 200.
    """

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    command: list[str]
    startup_s: float = 0.0
    _finalizer: weakref.finalize | None = field(default=None, repr=False)

    @property
    def alive(self) -> bool:
        """The server process is still running."""
        return self.process.poll() is None

    def log_tail(self, n_lines: int = 40) -> str:
        """The last ``n_lines`` lines of the server log."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n_lines:])

    def stop(self, grace_s: float = 15.0) -> None:
        """Terminate the server's process group (SIGTERM, then SIGKILL after ``grace_s``).
        Idempotent."""
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        _kill_group(self.process, grace_s)

    def wait_healthy(
        self, timeout_s: float = 900.0, *, progress: bool = False, route: str = "/health"
    ) -> float:
        """Wait until ``GET route`` answers 200; sets and returns :attr:`startup_s`
        (seconds since this call began). The server is stopped when it fails.

        Raises:
            SGLangLaunchError: the process exited, or no 200 within ``timeout_s``.
        """
        what = "sglang-router" if "sglang_router" in " ".join(self.command) else "SGLang"
        try:
            self.startup_s = _wait_healthy(self, timeout_s, progress, route, what)
        except BaseException:
            self.stop(grace_s=5.0)
            raise
        return self.startup_s

    def __enter__(self) -> SGLangServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def launch_sglang(
    model_dir: str | os.PathLike[str],
    *,
    python: str | os.PathLike[str] | None = None,
    host: str = "127.0.0.1",
    port: int | None = None,
    device: Literal["auto", "cpu", "cuda"] = "auto",
    dtype: str | None = None,
    skip_tokenizer_init: bool = True,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    log_path: str | os.PathLike[str] | None = None,
    startup_timeout_s: float = 900.0,
    progress: bool = True,
    die_with_parent: bool = True,
    niceness: int = 0,
    wait: bool = True,
) -> SGLangServer:
    """Start ``python -m sglang.launch_server`` for ``model_dir`` and wait until its
    ``/health`` answers 200.

    Args:
        model_dir: an HF model directory (config.json + safetensors).
        python: the interpreter of the environment holding SGLang. Default:
            ``<default_sglang_env()>/bin/python`` (see ``tools/sglang/install.sh``).
        host, port: where the server listens (port None: a free port).
        device: ``"cpu"`` adds the CPU set-up (env vars, stub libcuda, :data:`CPU_ARGS`);
            ``"auto"`` means ``"cuda"`` when an NVIDIA driver is present, else ``"cpu"``.
        dtype: ``--dtype`` (None: SGLang's choice, ``auto``).
        skip_tokenizer_init: pass ``--skip-tokenizer-init`` (the proxy tokenizes; requests
            are ``input_ids`` and replies ``output_ids`` only).
        extra_args: more command-line flags, appended last (they override earlier ones).
        env: extra environment variables for the server (override the defaults).
        log_path: file for the server's output (default: a new temporary file).
        startup_timeout_s: give up (and kill the server) after this many seconds.
        progress: show a rich status line with the elapsed time and the last log line.
        die_with_parent: on Linux, have the kernel send SIGTERM to the server when this
            process dies (``prctl(PR_SET_PDEATHSIG)``), so a killed test run or CI job never
            leaves SGLang behind. Applied only when called from the main thread (the signal
            fires when the *launching thread* exits).
        niceness: added to the server's nice value (``os.nice`` in the child; 0: none), so
            a CPU server shares a busy machine politely.
        wait: wait for ``/health`` here (False: return at once; call
            :meth:`SGLangServer.wait_healthy` later, e.g. after starting several servers).

    Returns:
        The running :class:`SGLangServer` (use as a context manager, or call ``stop()``).

    Raises:
        SGLangLaunchError: no such interpreter, the server exited during start-up, or it
            was not healthy within ``startup_timeout_s`` (the log tail is in the message).
        FileNotFoundError: ``model_dir`` does not exist.
    """
    model = Path(model_dir)
    if not (model / "config.json").is_file():
        raise FileNotFoundError(f"not an HF model directory (no config.json): {model}")
    env_root = default_sglang_env()
    py = Path(python) if python is not None else env_root / "bin" / "python"
    if not py.exists():
        raise SGLangLaunchError(
            f"no SGLang interpreter at {py}: run `bash tools/sglang/install.sh` "
            "(or pass python=...)"
        )
    if device == "auto":
        device = "cuda" if _has_nvidia_gpu() else "cpu"
    port = port if port is not None else _free_port(host)
    cmd, child_env = _server_command(
        py, model, host, port, device, dtype, skip_tokenizer_init, extra_args, env
    )
    log_file = _log_file(log_path)
    proc = _spawn(cmd, child_env, log_file, die_with_parent, niceness)
    url = f"http://{host}:{port}"
    server = SGLangServer(url=url, process=proc, log_path=log_file, command=cmd)
    server._finalizer = weakref.finalize(server, _kill_group, proc, 5.0)
    if wait:
        server.wait_healthy(startup_timeout_s, progress=progress)
    return server


def _server_command(
    py: Path,
    model: Path,
    host: str,
    port: int,
    device: str,
    dtype: str | None,
    skip_tokenizer_init: bool,
    extra_args: Sequence[str],
    env: Mapping[str, str] | None,
) -> tuple[list[str], dict[str, str]]:
    """The server's command line and environment (``launch_sglang``'s arguments; ``device``
    already resolved to ``"cpu"`` or ``"cuda"``)."""
    cmd = [str(py), "-m", "sglang.launch_server", "--model-path", str(model.resolve())]
    cmd += ["--host", host, "--port", str(port)]
    child_env = dict(os.environ)
    if device == "cpu":
        cmd += list(CPU_ARGS)
        child_env["SGLANG_USE_CPU_ENGINE"] = "1"
        # the stub lives next to the interpreter's environment (bin/python -> ../clawrl-stub)
        stub = py.parent.parent / "clawrl-stub"
        if (stub / "libcuda.so.1").exists():
            old = child_env.get("LD_LIBRARY_PATH")
            child_env["LD_LIBRARY_PATH"] = f"{stub}:{old}" if old else str(stub)
    if dtype is not None:
        cmd += ["--dtype", dtype]
    if skip_tokenizer_init:
        cmd.append("--skip-tokenizer-init")
    cmd += list(extra_args)
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    child_env.update(env or {})
    return cmd, child_env


def _log_file(log_path: str | os.PathLike[str] | None) -> Path:
    """``log_path`` (its folder created), or a new temporary file."""
    if log_path is None:
        fd, name = tempfile.mkstemp(prefix="sglang-", suffix=".log")
        os.close(fd)
        return Path(name)
    log_file = Path(log_path)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    return log_file


def _spawn(
    cmd: list[str],
    env: dict[str, str],
    log_file: Path,
    die_with_parent: bool,
    niceness: int = 0,
) -> subprocess.Popen[bytes]:
    """Start the server in its own process group, its output going to ``log_file``."""
    pdeathsig = die_with_parent and threading.current_thread() is threading.main_thread()

    def preexec() -> None:  # runs in the child between fork and exec
        if niceness:
            os.nice(niceness)
        if pdeathsig:
            _set_parent_death_signal()

    with open(log_file, "wb") as out:
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # own process group: stop() kills the whole tree
            preexec_fn=preexec if (pdeathsig or niceness) else None,
        )


def _wait_healthy(
    server: SGLangServer,
    timeout_s: float,
    progress: bool,
    route: str = "/health",
    what: str = "SGLang",
) -> float:
    """Seconds until ``GET route`` answered 200.

    Raises:
        SGLangLaunchError: the process exited, or no 200 within ``timeout_s``.
    """
    start = time.monotonic()
    status_cm: contextlib.AbstractContextManager[object]
    status = None
    if progress:
        from rich.console import Console

        console = Console(stderr=True)
        status = console.status(f"starting {what}")
        status_cm = status
    else:
        status_cm = contextlib.nullcontext()
    with status_cm, httpx.Client(timeout=httpx.Timeout(5.0, connect=1.0)) as client:
        while True:
            elapsed = time.monotonic() - start
            if not server.alive:
                raise SGLangLaunchError(
                    f"{what} exited with code {server.process.returncode} during start-up "
                    f"(log {server.log_path}):\n{server.log_tail()}"
                )
            if elapsed > timeout_s:
                raise SGLangLaunchError(
                    f"{what} not healthy after {timeout_s:.0f} s (log {server.log_path}):\n"
                    f"{server.log_tail()}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if client.get(f"{server.url}{route}").status_code == 200:
                    return elapsed
            if status is not None:
                last = server.log_tail(1).strip()[-100:]
                status.update(f"starting {what} at {server.url}: {elapsed:4.0f} s  {last}")
            time.sleep(1.0)
