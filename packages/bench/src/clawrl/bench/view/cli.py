"""``bench view RUN_DIR [--out DIR] [--no-open]``: write (and open) a run's viewer."""

from __future__ import annotations

import argparse
import time
import webbrowser
from collections.abc import Sequence
from pathlib import Path

__all__ = ["view_main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bench view",
        description="Write an offline HTML viewer of a bench or train run: RUN_DIR/view/"
        "index.html (works from file://, no server, no network).",
    )
    p.add_argument("run_dir", type=Path, help="a bench run (results.json) or a train run folder")
    p.add_argument("--out", type=Path, help="output folder (default RUN_DIR/view)")
    p.add_argument(
        "--no-open", dest="open", action="store_false", help="do not open it in a browser"
    )
    return p


def view_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``bench view``; returns the exit code (2: not a run folder)."""
    from clawrl.bench.view.page import build_view

    args = _parser().parse_args(argv)
    t0 = time.time()
    try:
        index = build_view(args.run_dir, args.out)
    except FileNotFoundError as exc:
        print(f"bench view: {exc}")
        return 2
    n = len(list((index.parent / "data").glob("*.js")))
    print(f"viewer: {index} ({n} data files, {time.time() - t0:.1f} s)")
    if args.open:
        try:
            webbrowser.open(index.resolve().as_uri())
        except Exception as exc:  # no browser here: the file is written all the same
            print(f"bench view: could not open a browser ({exc})")
    return 0
