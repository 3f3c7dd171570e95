"""Copy the small part of a `uv run train --out RUN` directory into a run record (docs/runs/).

    uv run python tools/train/record_run.py runs/mix-real-s0 docs/runs/mix-real-s0 \
        --title "Cold start and GRPO, seed 0" --command "uv run train --config ... --steps 5"

Keeps `config.json`, `metrics.jsonl`, `summary.json`, the held-out evaluations
(`rollouts/eval-*.jsonl`, one line per rollout: task, harness, status, end, reward, calls,
sub-scores) with their table (`eval_table.json`, from
tools/train/eval_table.py) and `curves.png` re-encoded with a 64-colour palette; leaves
checkpoints, call records (`capture/`), train rollout logs and tasks behind. Writes a README.md
stub (title, command, the held-out table) unless the record has one.
Exits 2 with one line when RUN is not a training run, or when the record would pass the size
limit of a run record (200 KB; tests/test_docs.py checks it).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

LIMIT_BYTES = 200_000
KEEP = ("config.json", "metrics.jsonl", "summary.json")
#: the fields kept of each held-out rollout line
ROW_FIELDS = ("task_id", "harness", "status", "reason", "end_reason", "reward", "n_calls")
ROW_FIELDS += ("excluded", "subscores")


class RecordError(Exception):
    pass


def _quantised_png(src: Path) -> bytes:
    from PIL import Image

    with Image.open(src) as im:
        out = io.BytesIO()
        im.convert("RGB").quantize(colors=64).save(out, format="PNG", optimize=True)
        return out.getvalue()


def _compact_rows(path: Path) -> bytes:
    """An evaluation's rollout lines with only the fields a reader of the record needs (the
    loop's lines also hold logs, verifier output and workspace diffs)."""
    out = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        small = {k: row[k] for k in ROW_FIELDS if k in row}
        if isinstance(small.get("reason"), str):
            small["reason"] = small["reason"][:200]
        out.append(json.dumps(small) + "\n")
    return "".join(out).encode()


def _round(value: object) -> object:
    """Floats to 6 significant digits, through lists and dicts (a record is read, not
    replayed: ``0.6310811042785645`` and ``0.631081`` tell a reader the same)."""
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, list):
        return [_round(v) for v in value]
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    return value


def _rounded_metrics(data: bytes) -> bytes:
    """``metrics.jsonl`` with its floats rounded (:func:`_round`); unchanged if a line is not
    JSON."""
    try:
        rows = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
    except ValueError:
        return data
    return "".join(json.dumps(_round(row)) + "\n" for row in rows).encode()


def _eval_table(run: Path) -> tuple[str, bytes]:
    """tools/train/eval_table.py's Markdown tables and JSON for ``run``."""
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        import eval_table
    finally:
        sys.path.pop(0)
    with tempfile.TemporaryDirectory() as tmp:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            eval_table.main([str(run), "--json", f"{tmp}/t.json", "--eval", _last_tag(run)])
        return out.getvalue(), Path(f"{tmp}/t.json").read_bytes()


def _last_tag(run: Path) -> str:
    """The last T = 1 evaluation's tag (``step-5`` after ``coldstart-10``), by modification
    time: the template table is shown for it."""
    files = [p for p in (run / "rollouts").glob("eval-*.jsonl") if not p.stem.endswith("-greedy")]
    last = max(files or (run / "rollouts").glob("eval-*.jsonl"), key=lambda p: p.stat().st_mtime)
    return last.stem.removeprefix("eval-")


def record(run: Path, dest: Path, title: str | None = None, command: str | None = None) -> int:
    """Write the record of ``run`` into ``dest``; returns its size in bytes."""
    if not (run / "config.json").is_file() or not (run / "metrics.jsonl").is_file():
        raise RecordError(f"{run} is not a training run (no config.json and metrics.jsonl)")
    files: dict[str, bytes] = {}
    for name in KEEP:
        if (run / name).is_file():
            files[name] = (run / name).read_bytes()
    if "metrics.jsonl" in files:
        files["metrics.jsonl"] = _rounded_metrics(files["metrics.jsonl"])
    table = ""
    evals = sorted((run / "rollouts").glob("eval-*.jsonl"))
    for p in evals:
        files[p.name] = _compact_rows(p)
    if evals:
        table, files["eval_table.json"] = _eval_table(run)
    if (run / "curves.png").is_file():
        files["curves.png"] = _quantised_png(run / "curves.png")
    readme = dest / "README.md"
    if not readme.exists():
        text = f"# {title or run.name}\n\n"
        if command:
            text += f"```bash\n{command}\n```\n\n"
        text += table
        files["README.md"] = text.encode()
    size = sum(len(b) for b in files.values())
    if readme.exists():
        size += readme.stat().st_size
    if size > LIMIT_BYTES:
        big = max(files, key=lambda n: len(files[n]))
        raise RecordError(
            f"the record would be {size} bytes, over the {LIMIT_BYTES}-byte limit "
            f"(largest: {big}, {len(files[big])} bytes)"
        )
    dest.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (dest / name).write_bytes(data)
    return size


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="the run directory (uv run train --out)")
    p.add_argument("dest", type=Path, help="the record directory, e.g. docs/runs/NAME")
    p.add_argument("--title", help="the README stub's title")
    p.add_argument("--command", help="the command that made the run, for the README stub")
    args = p.parse_args(argv)
    try:
        size = record(args.run, args.dest, args.title, args.command)
    except RecordError as exc:
        print(f"record_run: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.dest} ({size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
