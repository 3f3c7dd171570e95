"""``bench``: run tasks through agent harnesses against a model, score them, report.

    bench                                   # default slice: 6 built-in tasks (one easy task per
                                            # category) × {reference harness, oracle}, the
                                            # embedded tiny model; results in runs/bench-<time>/
    bench --slice all --harness reference --samples 4 --k 1 2 4
    bench --suite path/to/suite --harness noop  # every task of an external suite; lists the
                                            # tasks that score without work
    bench --suite path/to/suite --slice 20 --slice-seed 1   # a seeded sample of 20 tasks
    bench --task path/to/harbor_task --harness oracle reference
    bench --model scripted                  # ScriptedBackend: the reference harness is fed each
                                            # task's oracle as tool calls (a pipeline check)
    bench --model sglang --sglang-url http://127.0.0.1:30000 --model-dir DIR
    bench --config bench.toml --concurrency 4
    bench --list                            # the selected tasks, nothing run

Writes ``results.json`` (summary + every rollout: status, reward, sub-scores, call records,
workspace diff, harness logs), ``config.json`` (the resolved configuration) and
``report.html``. Exit codes: 0 done; 2 bad arguments or configuration; 3 every rollout
failed for infrastructure reasons.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from clawrl.bench.config import BenchConfig, ConfigError, load_config, select_tasks
from clawrl.bench.errors import BenchError
from clawrl.bench.harness import HarnessAdapter, get_harness, oracle_completions
from clawrl.bench.harness.registry import builtin_harness_names
from clawrl.bench.report import scores_without_work, summarize, write_results
from clawrl.bench.runner import (
    ModelEndpoint,
    RolloutEvent,
    RolloutOptions,
    RolloutResult,
    RolloutRunner,
    RolloutSpec,
    RolloutStatus,
    plan_rollouts,
)
from clawrl.bench.task import Task, withhold_network
from clawrl.proxy import ProxyStartError, SessionInfo
from clawrl.sandbox import SandboxHosts
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bench",
        description="Run tasks through agent harnesses in podman sandboxes against a model.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    p.add_argument("--config", type=Path, help="TOML file (every key optional)")
    p.add_argument("--suite", dest="suites", nargs="+", help="'builtin' or suite directories")
    p.add_argument(
        "--task", dest="tasks", nargs="+", help="task directories (any layout) or dataset files"
    )
    p.add_argument("--task-id", dest="task_ids", nargs="+", help="keep only these task ids")
    p.add_argument(
        "--layout",
        help="layout of the --suite/--task directories (default: detected): a name or an "
        "import path 'module:Class'",
    )
    p.add_argument(
        "--slice",
        help="auto (default: built-in 'default', an external suite all its tasks), default "
        "(one easy task per category), all, N tasks or a fraction (e.g. 0.25) sampled per suite",
    )
    p.add_argument("--slice-seed", type=int, help="seed of a sampled --slice (default 0)")
    p.add_argument(
        "--harness",
        dest="harnesses",
        nargs="+",
        help=f"of {', '.join(builtin_harness_names())}, an installed plugin (entry point "
        "clawrl.harnesses) or module:Class",
    )
    p.add_argument("--model", choices=["embedded", "scripted", "sglang"])
    p.add_argument("--tokenizer", choices=["byte", "qwen3"], help="default tiny model's tokenizer")
    p.add_argument("--model-dir", help="HF model directory (default: the tiny default model)")
    p.add_argument("--sglang-url", help="URL of a running SGLang server (--model sglang)")
    p.add_argument(
        "--launch-sglang",
        action="store_true",
        default=None,
        help="start SGLang for the model (--model sglang)",
    )
    p.add_argument("--samples", type=int, help="rollouts per task and harness")
    p.add_argument("--concurrency", type=int, help="rollouts in flight at once")
    p.add_argument("--max-turns", type=int, help="harness turn limit")
    p.add_argument("--max-tokens", type=int, help="per-call output cap (0 = none)")
    p.add_argument("--timeout", dest="agent_timeout_s", type=float, help="agent timeout, s")
    p.add_argument("--retries", type=int, help="retries after infrastructure failures")
    p.add_argument("--k", dest="ks", type=int, nargs="+", help="pass@k values")
    p.add_argument("--output-dir", help="default runs/bench-<timestamp>")
    p.add_argument("--run-id", help="proxy run id / sandbox label")
    p.add_argument("--no-html", dest="html", action="store_false", default=None)
    p.add_argument(
        "--no-task-images",
        dest="task_images",
        action="store_false",
        default=None,
        help="do not build tasks' Dockerfiles: run every task in the default root",
    )
    p.add_argument(
        "--agent-network",
        action="store_true",
        default=None,
        help="trusted tasks only: the agent phase of tasks that declare a network gets "
        "podman's bridge network (what this host reaches)",
    )
    p.add_argument(
        "--no-network",
        dest="network",
        action="store_false",
        default=None,
        help="no task gets a network, in any phase (a task that declares one and then scores "
        "below 1 is a verifier-error naming the network)",
    )
    p.add_argument("--list", action="store_true", help="list the selected tasks and exit")
    return p


@contextlib.asynccontextmanager
async def _model(cfg: BenchConfig, console: Console) -> Any:
    """Yields (endpoint, scripted backend or None, model description, decode)."""
    from clawrl.proxy import BackendConfig, ChatRenderer, build_default_model, make_backend, serve
    from clawrl.proxy.testing import ScriptedBackend
    from clawrl.sandbox import owned_tempdir

    if cfg.model_dir:
        from clawrl.proxy import resolve_model

        # a directory (checked before the run), or a known model's name: fetched once
        model_dir = Path(await asyncio.to_thread(resolve_model, cfg.model_dir))
    else:
        console.print(f"[dim]building / loading the default tiny model ({cfg.tokenizer})…[/dim]")
        model_dir = Path(await asyncio.to_thread(build_default_model, cfg.tokenizer))
    renderer = await asyncio.to_thread(ChatRenderer.from_model_dir, model_dir)
    cleanup: list[Callable[[], None]] = []
    try:
        url = cfg.sglang_url
        if cfg.model == "sglang" and cfg.launch_sglang:
            from clawrl.proxy import launch_sglang

            console.print("[dim]launching SGLang (minutes)…[/dim]")
            server = await asyncio.to_thread(launch_sglang, model_dir)
            cleanup.append(server.stop)
            url = server.url
        if cfg.model == "embedded":
            console.print("[dim]starting the embedded backend (CPU)…[/dim]")
        backend = make_backend(BackendConfig(kind=cfg.model, model_dir=model_dir, sglang_url=url))
        scripted = backend if isinstance(backend, ScriptedBackend) else None
        async with serve(backend, model_dir, tempdir=owned_tempdir) as endpoint:
            yield endpoint, scripted, f"{cfg.model}:{model_dir}", renderer.decode
    finally:
        for fn in cleanup:
            fn()


def _progress_printer(
    progress: Progress, bar: Any, console: Console
) -> Callable[[RolloutEvent], None]:
    def on_event(e: RolloutEvent) -> None:
        if e.kind == "message":
            console.print(f"[dim]{escape(e.message)}[/dim]")
        elif e.kind == "retry" and e.spec and e.result:
            console.print(
                f"[yellow]retry[/yellow] {escape(e.spec.task.id)} · {e.spec.harness.name}: "
                + escape(e.result.reason)
            )
        elif e.kind == "finished" and e.result:
            r = e.result
            style = "green" if r.status is RolloutStatus.OK else "yellow"
            if r.status is RolloutStatus.INFRA_ERROR:
                style = "red"
            elif r.excluded:
                style = "magenta"
            progress.advance(bar)
            console.print(
                f"[{style}]{r.status.value:>14}[/{style}] {r.reward:4.2f}  {escape(r.task_id)} · {r.harness}"
                f" #{r.sample_index}  ({r.n_calls} calls, {r.timing.get('total', 0):.1f} s)"
                + ("  (excluded)" if r.excluded else "")
                + (f"  [dim]{escape(r.reason[:100])}[/dim]" if r.reason else "")
            )

    return on_event


def _pass_cell(value: float | None, stderr: float | None) -> str:
    """``0.406 ± 0.071`` (± the standard error over tasks), ``0.406`` with one task, ``–``."""
    if value is None:
        return "–"
    return f"{value:.3f}" if stderr is None else f"{value:.3f} ± {stderr:.3f}"


def _print_tables(console: Console, results: Sequence[RolloutResult], cfg: BenchConfig) -> None:
    summary = summarize(results, cfg.ks, cfg.pass_threshold)
    t = Table(title="per harness")
    cols = (
        "harness",
        "tasks",
        "scored",
        "infra (excluded)",
        "env (excluded)",
        "harness health (excluded)",
        "verifier errors",
    )
    for col in (*cols, "mean score"):
        t.add_column(col)
    for k in cfg.ks:
        t.add_column(f"pass@{k}")
    t.add_column("statuses")
    for name, g in summary.by_harness.items():
        t.add_row(
            name,
            str(g.n_tasks),
            str(g.n_scored),
            str(g.n_infra_error),
            str(g.n_env_error),
            str(g.n_excluded),
            str(g.n_verifier_error),
            "–" if g.mean_score is None else f"{g.mean_score:.3f}",
            *[_pass_cell(g.pass_at_k.get(k), g.pass_at_k_stderr.get(k)) for k in cfg.ks],
            ", ".join(f"{s} {n}" for s, n in g.status_counts.items()),
        )
    rows = Table(title="per task")
    for col in ("task", "category", "harness", "n", "mean reward", "statuses"):
        rows.add_column(col)
    tasks: dict[tuple[str, str], list[RolloutResult]] = {}
    for r in results:
        tasks.setdefault((r.task_id, r.harness), []).append(r)
    for (task_id, harness), rs in sorted(tasks.items()):
        scored = [r.reward for r in rs if r.counts]
        rows.add_row(
            task_id,
            rs[0].category or "",
            harness,
            str(len(rs)),
            f"{sum(scored) / len(scored):.2f}" if scored else "–",
            ", ".join(sorted({r.status.value for r in rs})),
        )
    console.print(rows)
    console.print(t)
    without = scores_without_work(results)
    if without:
        console.print(
            f"[yellow]{len(without)} task(s) score without work (noop harness, reward > 0): "
            + ", ".join(f"{w['task_id']} ({w['reward']:.2f})" for w in without)
            + "[/yellow]"
        )


def _options(cfg: BenchConfig) -> RolloutOptions:
    """The runner's options from the configuration."""
    return RolloutOptions(
        max_turns=cfg.max_turns,
        # the scripted backend's completions (whole oracle scripts) are never cut
        max_tokens=(cfg.max_tokens or None) if cfg.model != "scripted" else None,
        agent_timeout_s=cfg.agent_timeout_s or None,
        timeout_reference_tps=cfg.timeout_reference_tps or None,
        retries=cfg.retries,
        task_images=cfg.task_images,
        agent_network=cfg.agent_network,
    )


#: Seconds after a first Ctrl-C in which another SIGINT counts as the same one.
_REPEAT_S = 1.0


class _Interrupt:
    """Ctrl-C during a run: the first cancels the run (finished rollouts are saved, every
    sandbox is destroyed); a second, a second or more later, exits at once, after a
    best-effort removal of the run's containers."""

    def __init__(self, console: Console, run_id: str) -> None:
        self.console = console
        self.run_id = run_id
        self.count = 0
        self.first = 0.0
        self.task: asyncio.Task[Any] | None = None

    def install(self) -> None:
        self.task = asyncio.current_task()
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGINT, self._on_sigint)
            # SIGTERM (kill, a scheduler's preemption) takes the same path as Ctrl-C
            loop.add_signal_handler(signal.SIGTERM, self._on_sigint)

    def _on_sigint(self) -> None:
        now = time.monotonic()
        if self.count and now - self.first < _REPEAT_S:
            # the same Ctrl-C, reported again by a forked child that shares the event
            # loop's wakeup socket (the terminal signals the whole process group)
            return
        self.count += 1
        if self.count == 1 and self.task is not None:
            self.first = now
            self.console.print(
                "bench: interrupted: stopping the rollouts in progress and saving the finished "
                "ones (Ctrl-C again to quit at once)",
                style="red",
                markup=False,
            )
            self.task.cancel()
            return
        self.console.print(
            "bench: forced quit; a sandbox left behind stops by its wall clock (or: sandbox gc)",
            style="red",
            markup=False,
        )
        _remove_containers(self.run_id)
        os._exit(130)


def _remove_containers(run_id: str) -> None:
    """Best effort, a few seconds at most: remove the local containers of ``run_id``."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        ids = subprocess.run(
            ["podman", "ps", "-aq", "--filter", f"label=clawrl.run_id={run_id}"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.split()
        if ids:
            subprocess.run(["podman", "rm", "-f", "-t", "0", *ids], capture_output=True, timeout=10)


async def _run(
    cfg: BenchConfig,
    tasks: list[Task],
    harnesses: list[HarnessAdapter],
    out_dir: Path,
    console: Console,
) -> int:
    started = time.time()
    run_id = cfg.run_id or f"bench-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}"
    options = _options(cfg)
    specs = plan_rollouts(tasks, harnesses, cfg.samples)
    needs_model = any(h.needs_model for h in harnesses)
    interrupt = _Interrupt(console, run_id)
    interrupt.install()
    finished: dict[str, RolloutResult] = {}  # rollout id -> result, as they finish
    model_desc, decode = "none", None
    health: list[dict[str, Any]] = []
    try:
        async with contextlib.AsyncExitStack() as stack:
            endpoint: ModelEndpoint | None = None
            scripted = None
            if needs_model:
                endpoint, scripted, model_desc, decode = await stack.enter_async_context(
                    _model(cfg, console)
                )

            async def hook(session: SessionInfo, spec: RolloutSpec) -> None:
                # scripted model: feed the reference harness each task's oracle as tool calls
                if scripted is not None and spec.harness.name == "reference" and spec.task.solution:
                    with contextlib.suppress(ValueError):
                        scripted.script(session.session_id, oracle_completions(spec.task))

            with Progress(
                TextColumn("[bold]rollouts"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
                transient=False,
            ) as progress:
                bar = progress.add_task("rollouts", total=len(specs))
                hosts = None
                if cfg.sandbox_hosts:
                    hosts = SandboxHosts([h.host() for h in cfg.sandbox_hosts])
                    await stack.enter_async_context(hosts)
                printer = _progress_printer(progress, bar, console)

                def on_event(e: RolloutEvent) -> None:
                    if e.kind == "finished" and e.result is not None:
                        finished[e.result.rollout_id] = e.result
                    printer(e)

                runner = RolloutRunner(
                    endpoint,
                    options,
                    concurrency=cfg.concurrency,
                    run_id=run_id,
                    progress=on_event,
                    session_hook=hook,
                    sandbox_hosts=hosts,
                )
                results = await runner.run(specs)
                health = [dataclasses.asdict(h) for h in hosts.health()] if hosts else []
    except asyncio.CancelledError:
        if not interrupt.count:
            raise
        if interrupt.task is not None:
            interrupt.task.uncancel()
        results = [finished[s.rollout_id] for s in specs if s.rollout_id in finished]
    interrupted = bool(interrupt.count)
    if interrupted and not results:
        console.print(
            f"bench: interrupted before any rollout finished; nothing saved (run {run_id})",
            style="red",
            markup=False,
        )
        return 130
    meta = {
        "run_id": run_id,
        "started": started,
        "started_iso": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
        "duration_s": time.time() - started,
        "model": model_desc,
        "harnesses": [h.describe() for h in harnesses],
        "n_tasks": len(tasks),
        "n_rollouts": len(results),
        "n_planned": len(specs),
        "interrupted": interrupted,
        "argv": sys.argv,
        "sandbox_hosts": health,
    }
    paths = write_results(
        out_dir,
        results,
        config=cfg.model_dump(mode="json") | {"output_dir": str(out_dir), "run_id": run_id},
        meta=meta,
        ks=cfg.ks,
        pass_threshold=cfg.pass_threshold,
        decode=decode,
        html=cfg.html,
    )
    _print_tables(console, results, cfg)
    for name, path in paths.items():
        console.print(f"{name}: {path}", markup=False, highlight=False)
    if interrupted:
        console.print(
            f"bench: interrupted: {len(results)} of {len(specs)} rollouts finished, saved to "
            f"{out_dir}",
            style="red",
            markup=False,
        )
        return 130
    if results and all(r.status is RolloutStatus.INFRA_ERROR for r in results):
        return 3
    return 0


def _console() -> Console:
    """stdout's console; when stdout is not a terminal (a pipe, a file) it is wide enough
    that no table column is cut."""
    console = Console(stderr=False)
    if not console.is_terminal:
        console = Console(stderr=False, width=max(console.width, 1000))
    return console


def _usage_error(exc: BaseException) -> int:
    """Print a user's mistake as one line on stderr; the exit status 2."""
    print("bench: " + " ".join(str(exc).split()), file=sys.stderr)
    return 2


def _check_run_options(cfg: BenchConfig, harnesses: Sequence[HarnessAdapter]) -> None:
    """What the configuration can only get wrong for a run (before the first rollout).

    Raises:
        ConfigError: ``model_dir`` is neither a model directory the proxy can serve nor a
            known model's name; ``output_dir`` is a file.
    """
    from clawrl.proxy import KNOWN_MODELS, ModelKitError, check_model_dir

    if cfg.output_dir and Path(cfg.output_dir).exists() and not Path(cfg.output_dir).is_dir():
        raise ConfigError(f"output_dir (--output-dir): {cfg.output_dir} is a file")
    if not cfg.model_dir or not any(h.needs_model for h in harnesses):
        return
    path = Path(cfg.model_dir)
    if path.is_dir():
        try:
            check_model_dir(path)
        except ModelKitError as exc:
            raise ConfigError(f"model_dir (--model-dir): {exc}") from None
    elif cfg.model_dir not in KNOWN_MODELS:
        raise ConfigError(
            f"model_dir (--model-dir): {cfg.model_dir} is not a directory nor a known model "
            f"(one of: {', '.join(sorted(KNOWN_MODELS))})"
        )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["view"]:  # `bench view RUN_DIR`: the offline viewer (clawrl.bench.view)
        from clawrl.bench.view import view_main

        return view_main(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    console = _console()
    overrides = {
        k: v for k, v in vars(args).items() if k not in {"config", "list"} and v is not None
    }
    flags = {a.dest: a.option_strings[-1] for a in parser._actions if a.option_strings}
    try:
        cfg = load_config(args.config, overrides, flags)
        tasks = select_tasks(cfg)
        if not cfg.network:
            tasks = withhold_network(tasks)
        harnesses = [get_harness(n) for n in cfg.harnesses]
        if not args.list:
            _check_run_options(cfg, harnesses)
    except (BenchError, ValueError) as exc:
        return _usage_error(exc)
    if args.list:
        table = Table(title=f"{len(tasks)} tasks")
        for col in ("id", "layout", "category", "difficulty", "workspace"):
            table.add_column(col)
        for t in tasks:
            table.add_row(
                t.id, str(t.layout), t.category_label or "", t.difficulty or "", t.workspace_path
            )
        console.print(table)
        return 0
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    out_dir = Path(cfg.output_dir or f"runs/bench-{stamp}")
    console.print(
        f"bench: {len(tasks)} tasks × {len(harnesses)} harnesses × {cfg.samples} samples "
        f"→ {out_dir}"
    )
    if cfg.agent_network:
        opted = [t.id for t in tasks if t.network]
        console.print(
            f"[yellow]--agent-network: the agent phase of {len(opted)} task(s) that declare a "
            "network runs on podman's bridge network: it reaches what this host reaches (here "
            "the package registries), not only the model socket"
            + (f": {', '.join(opted[:10])}" if opted else "")
            + "[/yellow]"
        )
    try:
        return asyncio.run(_run(cfg, tasks, harnesses, out_dir, console))
    except (BenchError, ProxyStartError) as exc:
        return _usage_error(exc)
    except KeyboardInterrupt:
        console.print("[red]bench: interrupted[/red]")
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
