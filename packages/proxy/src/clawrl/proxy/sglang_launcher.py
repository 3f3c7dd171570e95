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
the launcher applies what SGLang 0.5.23 was found to need on a CPU-only machine:
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
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
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

#: flags that make SGLang 0.5.23 serve on a CPU-only machine
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


#: where :func:`_free_port` looks: below the kernel's ephemeral range, where ``bind(0)`` and
#: outgoing connections (gloo, ZMQ, every HTTP client) never take a port, and below the
#: 22000-29999 that SGLang itself draws its internal ports from
#: (``sglang.srt.utils.network.get_free_port_below_ephemeral``)
PORT_RANGE = (12000, 21999)
_port_rng = random.Random()  # its own stream: a test's random.seed() must not repeat ports
#: a process that picks a port, lets it go and spawns a server that binds it seconds later
#: can lose it to another process; such a start-up is retried this often on a new port
PORT_RETRIES = 2


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _free_port(host: str) -> int:
    """A TCP port free on ``host`` now, for a server that binds it only later: drawn from
    :data:`PORT_RANGE` (below the ephemeral range, so that only an explicit bind can take it
    meanwhile); ``bind(0)``'s choice when none of 64 draws is free."""
    low, high = PORT_RANGE[0], min(PORT_RANGE[1], _ephemeral_low() - 1)
    candidates = _port_rng.sample(range(low, high + 1), 64) if high - low >= 64 else []
    for port in candidates:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        chosen: int = s.getsockname()[1]
        return chosen


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
    #: spawns the same server on a new free port (set when the launcher chose the port)
    _respawn: Callable[[], SGLangServer] | None = field(default=None, repr=False)

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

        A server whose port the launcher chose, and which exited because another process
        bound that port first (:attr:`lost_port`: an error exit with "address already in
        use" in its log; uvicorn's bind failure is status 3), is started again on a new
        port, up to :data:`PORT_RETRIES` times, within the same ``timeout_s``; :attr:`url`,
        :attr:`process`, :attr:`log_path` and :attr:`command` then name the new one.

        Raises:
            SGLangLaunchError: the process exited, or no 200 within ``timeout_s``.
        """
        what = "sglang-router" if "sglang_router" in " ".join(self.command) else "SGLang"
        start = time.monotonic()
        for attempt in range(PORT_RETRIES + 1):
            try:
                left = max(0.0, timeout_s - (time.monotonic() - start))
                _wait_healthy(self, left, progress, route, what)
            except SGLangLaunchError:
                if attempt == PORT_RETRIES or self._respawn is None or not self.lost_port:
                    self.stop(grace_s=5.0)
                    raise
                self._take_over(self._respawn())
                continue
            except BaseException:
                self.stop(grace_s=5.0)
                raise
            break
        self.startup_s = time.monotonic() - start
        return self.startup_s

    @property
    def lost_port(self) -> bool:
        """The process failed because a port it binds was taken: it exited with an error
        (uvicorn's bind failure is status 3) and its log says "address already in use"."""
        if self.process.poll() in (None, 0):
            return False
        return "address already in use" in self.log_tail(80).lower()

    def _take_over(self, new: SGLangServer) -> None:
        """Become ``new`` (the same server respawned on another port)."""
        self.stop(grace_s=5.0)
        self.url, self.process, self.log_path = new.url, new.process, new.log_path
        self.command, self._respawn = new.command, new._respawn
        if new._finalizer is not None:  # it would kill the process when `new` is collected
            new._finalizer.detach()
            new._finalizer = None
        self._finalizer = weakref.finalize(self, _kill_group, self.process, 5.0)

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

    def command(at: int) -> tuple[list[str], dict[str, str]]:
        return _server_command(
            py, model, host, at, device, dtype, skip_tokenizer_init, extra_args, env
        )

    # a port we chose and lost is chosen again; the caller's own port is not retried
    server = _start(command, host, port, log_path, die_with_parent, niceness, port is None)
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
    append: bool = False,
) -> subprocess.Popen[bytes]:
    """Start the server in its own process group, its output going to ``log_file``
    (appended to it with ``append``: a respawn keeps the failed start's log)."""
    pdeathsig = die_with_parent and threading.current_thread() is threading.main_thread()

    def preexec() -> None:  # runs in the child between fork and exec
        if niceness:
            os.nice(niceness)
        if pdeathsig:
            _set_parent_death_signal()

    with open(log_file, "ab" if append else "wb") as out:
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # own process group: stop() kills the whole tree
            preexec_fn=preexec if (pdeathsig or niceness) else None,
        )


def _start(
    command: Callable[[int], tuple[list[str], dict[str, str]]],
    host: str,
    port: int | None,
    log_path: str | os.PathLike[str] | None,
    die_with_parent: bool,
    niceness: int,
    respawn: bool,
) -> SGLangServer:
    """Spawn ``command(port)`` (port None: :func:`_free_port`) as an :class:`SGLangServer`;
    with ``respawn``, :meth:`SGLangServer.wait_healthy` may start it again (on a new free
    port when ``port`` is None), appending to the same log."""

    def spawn(log: Path | None) -> SGLangServer:
        at = port if port is not None else _free_port(host)
        cmd, env = command(at)
        log_file = log if log is not None else _log_file(log_path)
        proc = _spawn(cmd, env, log_file, die_with_parent, niceness, append=log is not None)
        new = SGLangServer(url=f"http://{host}:{at}", process=proc, log_path=log_file, command=cmd)
        new._finalizer = weakref.finalize(new, _kill_group, proc, 5.0)
        if respawn:
            new._respawn = lambda: spawn(log_file)
        return new

    return spawn(None)


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
