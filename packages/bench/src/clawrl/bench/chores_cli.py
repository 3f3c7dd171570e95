"""``python -m clawrl.bench.chores_cli DEST [--split train|heldout] [--n N] [--seed S]
[--template T ...]``: write workspace-chore task directories (:mod:`clawrl.bench.chores`)
under DEST and print their ids; exit 2 with a one-line error on bad input."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from clawrl.bench.chores import CHORE_TEMPLATES, generate_chore_tasks
from clawrl.bench.errors import TaskLoadError

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m clawrl.bench.chores_cli``: write task directories (exit 2 on bad input)."""
    p = argparse.ArgumentParser(
        prog="python -m clawrl.bench.chores_cli",
        description="Write workspace-chore tasks (ClawGym layout) for bench --suite / train.",
    )
    p.add_argument("dest", type=Path, help="directory to write the task directories into")
    p.add_argument("--split", choices=["train", "heldout"], default="train")
    p.add_argument("--n", type=int, default=12, help="instances (spread over the templates)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--template", dest="templates", nargs="+", choices=CHORE_TEMPLATES)
    args = p.parse_args(argv)
    try:
        tasks = generate_chore_tasks(
            args.dest, args.split, args.n, args.seed, templates=args.templates
        )
    except (ValueError, OSError, TaskLoadError) as exc:
        print(f"chores: {exc}", file=sys.stderr)
        return 2
    for t in tasks:
        print(t.id)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
