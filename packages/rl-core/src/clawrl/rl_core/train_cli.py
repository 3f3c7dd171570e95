"""``train``: black-box RL of a policy through agent harnesses (see clawrl.rl_core.train).

    uv run train --config examples/quickstart.toml [--algo ppo] [--seed 1] [--steps 8]
                 [--out runs/x] [--set section.key=value ...] [--resume | --overwrite]
    uv run train export-hf runs/x/checkpoints/step-000016 DIR   # a Hugging Face model dir

Every configuration value has a default; the resolved configuration is saved as
``<out>/config.json``. ``--resume`` without ``--config`` continues the run in ``--out``
with its saved configuration; a non-empty ``--out`` needs ``--resume`` or ``--overwrite``.

Several trainer processes (DDP; gloo on CPU, NCCL on GPUs)::

    accelerate launch --multi_gpu --num_processes 2 -m clawrl.rl_core.train_cli --config X

Rank 0 runs the loop; the other ranks train in step with it
(:mod:`clawrl.rl_core.train.ranks`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clawrl.rl_core.train.loop import TrainLoop
    from rich.console import Console

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    from clawrl.bench import add_config_flags

    p = argparse.ArgumentParser(prog="train", description=__doc__.splitlines()[0])
    add_config_flags(
        p,
        config_help="TOML run configuration (default: all defaults)",
        set_metavar="SECTION.KEY=VALUE",
        set_help="override any value (TOML syntax)",
    )
    p.add_argument("--algo", choices=("grpo", "ppo"), help="override algo.name")
    p.add_argument("--seed", type=int, help="override run.seed")
    p.add_argument("--steps", type=int, help="override run.steps")
    p.add_argument("--out", help="override run.out (the results directory)")
    p.add_argument("--resume", action="store_true", help="continue from <out>/checkpoints/latest")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier run's results in --out (without it, or --resume, a "
        "non-empty --out is refused)",
    )
    p.add_argument("--no-progress", action="store_true", help="plain log lines")
    return p


def _overrides(args: argparse.Namespace) -> list[str]:
    """``--set`` values, then the named flags as ``section.key=value`` overrides."""
    overrides = list(args.overrides)
    for flag, key in (
        (args.algo, "algo.name"),
        (args.seed, "run.seed"),
        (args.steps, "run.steps"),
        (args.out, "run.out"),
    ):
        if flag is not None:
            overrides.append(f"{key}={flag!r}" if isinstance(flag, str) else f"{key}={flag}")
    return overrides


def _config_path(args: argparse.Namespace) -> str | None:
    """``--config``; or, on ``--resume`` without it, the run's saved ``config.json``."""
    if args.config is None and args.resume and args.out:
        saved = Path(args.out) / "config.json"
        if saved.exists():
            return str(saved)
    return args.config


#: Files that only a ``train`` run writes at the top of its output folder.
_RUN_MARKERS = ("config.json", "runs.jsonl", "metrics.jsonl")


def _claim_out(out: Path, *, resume: bool, overwrite: bool) -> str | None:
    """Check (and with ``overwrite``, empty) the output folder before anything starts; the
    reason it cannot be used, else None. A non-empty folder needs ``--resume`` (continue
    the run there) or ``--overwrite`` (remove it, if it is a train run's folder)."""
    if resume and overwrite:
        return "--resume and --overwrite exclude each other"
    if out.exists() and not out.is_dir():
        return f"run.out (--out): {out} is a file"
    if resume or not out.is_dir() or not any(out.iterdir()):
        return None
    if not overwrite:
        return (
            f"run.out (--out): {out} is not empty (an earlier run?): give --resume to "
            "continue it, --overwrite to replace it, or another --out"
        )
    if not any((out / name).exists() for name in _RUN_MARKERS):
        return f"run.out (--out): {out} holds no train run (no config.json): not removed"
    shutil.rmtree(out)
    return None


def _run_with_progress(loop: TrainLoop, console: Console) -> dict[str, Any]:
    """Run ``loop`` under a rich progress bar of the current batch's rollouts."""
    import asyncio

    from clawrl.bench import RolloutEvent
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        bar = progress.add_task("rollouts", total=0)

        def on_event(ev: object) -> None:
            if isinstance(ev, RolloutEvent) and ev.kind in ("started", "finished"):
                progress.update(bar, total=ev.total, completed=ev.done)
            elif isinstance(ev, RolloutEvent) and ev.kind == "message":
                console.log(ev.message)

        loop.progress = on_event
        return asyncio.run(_stoppable(loop))


def _export_hf(argv: list[str]) -> int:
    """``train export-hf CHECKPOINT DIR`` (:mod:`clawrl.rl_core.train.export`)."""
    p = argparse.ArgumentParser(
        prog="train export-hf",
        description="Write a train checkpoint as a Hugging Face model directory.",
    )
    p.add_argument("checkpoint", help="a checkpoint folder, or a run folder (its latest)")
    p.add_argument("out", help="the new model directory (absent or empty)")
    args = p.parse_args(argv)
    from clawrl.rl_core.errors import RLCoreError
    from clawrl.rl_core.train.export import export_checkpoint

    try:
        print(export_checkpoint(args.checkpoint, args.out))
    except RLCoreError as exc:
        print(f"train export-hf: {exc}", file=sys.stderr)
        return 2
    return 0


class _TrackedExecutor(ThreadPoolExecutor):
    """The event loop's default executor, counting its unfinished work items: an update runs
    in a worker thread (``asyncio.to_thread``), cannot be interrupted, and ``asyncio.run``
    would wait for it on the way out (minutes for a real model's step)."""

    def __init__(self) -> None:
        super().__init__(thread_name_prefix="clawrl-train")
        self.unfinished = 0
        self._count_lock = threading.Lock()

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self._count_lock:
            self.unfinished += 1
        try:
            fut = super().submit(fn, *args, **kwargs)
        except BaseException:
            self._done(None)
            raise
        fut.add_done_callback(self._done)
        return fut

    def _done(self, _: object) -> None:
        with self._count_lock:
            self.unfinished -= 1


def _interrupted_line(out: object) -> str:
    return f"train: interrupted; continue from the last checkpoint with --resume (--out {out})"


async def _stoppable(loop: TrainLoop) -> dict[str, Any]:
    """``loop.run()``, cancelled by SIGTERM (``kill``, a scheduler's preemption) as Ctrl-C
    cancels it: the rollouts in flight are cancelled and their sandboxes removed; the last
    checkpoint is kept (checkpoints are written to a temporary folder, then renamed). An
    update still running in a worker thread is abandoned: the process exits with status 130
    once the cancellation's clean-up is done (one process; with several ranks it waits)."""
    import asyncio
    import contextlib

    task = asyncio.current_task()
    assert task is not None
    running = asyncio.get_running_loop()
    executor = _TrackedExecutor()
    running.set_default_executor(executor)
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        running.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await loop.run()
    except asyncio.CancelledError:
        if executor.unfinished and loop.ranks is None:
            print(_interrupted_line(loop.cfg.run.out), file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(130)
        raise


def main(argv: list[str] | None = None) -> int:
    """The ``train`` command; returns the exit status (0 done, 1 the run failed with an
    rl-core error, 2 a configuration error)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["export-hf"]:
        return _export_hf(argv[1:])
    args = _parser().parse_args(argv)
    from clawrl.rl_core.errors import ConfigError, RLCoreError
    from clawrl.rl_core.train.config import load_config

    try:
        cfg = load_config(_config_path(args), _overrides(args))
    except RLCoreError as exc:
        print(f"train: config error: {exc}", file=sys.stderr)
        return 2
    if int(os.environ.get("RANK", "0")) == 0:  # the other ranks write nothing there
        problem = _claim_out(Path(cfg.run.out), resume=args.resume, overwrite=args.overwrite)
        if problem:
            print(f"train: {problem}", file=sys.stderr)
            return 2
    if cfg.algo.trainer.fsdp and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from clawrl.rl_core.train.ranks import FSDP_LOOP_ERROR

        print(f"train: config error: {FSDP_LOOP_ERROR}", file=sys.stderr)
        return 2  # on every rank (each parses the same arguments): nobody waits for rank 0
    import asyncio
    import json

    from clawrl.rl_core.malloc import fix_malloc_thresholds
    from clawrl.rl_core.train.loop import TrainLoop
    from clawrl.rl_core.train.ranks import follow, launch_ranks
    from rich.console import Console

    console = Console(stderr=False, highlight=False, markup=False)  # '[eval]' stays
    plain = args.no_progress or not cfg.logging.progress

    def say(line: str) -> None:
        if plain:
            print(line, flush=True)
        else:
            console.log(line)

    fix_malloc_thresholds()  # flat RSS over a long CPU run (see clawrl.rl_core.malloc)
    ranks = launch_ranks(cfg.run.rank_timeout_s)  # None in one process
    if ranks is not None and not ranks.is_main:
        follow(ranks, cfg.run.seed)  # until rank 0 sends stop
        return 0
    loop = TrainLoop(cfg, resume=args.resume, say=say, ranks=ranks)
    try:
        summary = asyncio.run(_stoppable(loop)) if plain else _run_with_progress(loop, console)
    except (KeyboardInterrupt, asyncio.CancelledError):
        print(_interrupted_line(cfg.run.out), file=sys.stderr)
        return 130
    except RLCoreError as exc:
        if plain:
            print(f"train: error: {exc}", file=sys.stderr)
        else:
            console.log(f"train: error: {exc}")
        return 2 if isinstance(exc, ConfigError) else 1  # a configuration the run refused
    finally:
        if ranks is not None:
            ranks.stop()  # the followers close and exit, also after an error here
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
