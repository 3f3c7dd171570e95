"""Verifier of built-in task `html_report`: named sub-scores in [0, 1] -> reward.json."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

WS = Path(os.environ.get("CLAWRL_WORKSPACE", "/workspace"))
OUT = Path(os.environ.get("CLAWRL_REWARD_DIR", "/logs/verifier"))


def path(rel: str) -> Path:
    """A regular file or directory of the workspace (symlinks are not accepted)."""
    p = WS / rel
    if p.is_symlink():
        raise ValueError(f"{rel} is a symlink")
    return p


def read(rel: str) -> str:
    return path(rel).read_text(encoding="utf-8")


def read_json(rel: str) -> Any:
    return json.loads(read(rel))


def read_csv(rel: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(read(rel))))


#: uid = gid of the unprivileged user that runs agent-written code (nobody / nogroup).
NOBODY = 65534
_handed_over: list[Path] = []


def hand_over(root: Path) -> Path:
    """Give the tree at `root` to the unprivileged user, so that agent code may write there.

    Symlinks are changed themselves, never followed; the reward directory and these verifier
    files are never handed over (even if they lie below `root`). Bottom-up: a directory is
    given away only after everything below it, so agent code still running (left by an
    earlier `run()`) cannot swap a directory that is still to be walked for a symlink.
    Returns `root`.
    """
    keep = {os.path.abspath(OUT), os.path.abspath(os.path.dirname(__file__))}

    def give(p: str) -> None:
        if not os.path.islink(p) and os.path.isdir(p):
            with os.scandir(p) as entries:
                below = [e.path for e in entries if e.path not in keep]
            for child in below:
                give(child)
        os.chown(p, NOBODY, NOBODY, follow_symlinks=False)

    give(os.path.abspath(root))
    return root


def run(argv: list[str], timeout: float = 20.0, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """Run agent-written code in the workspace as the unprivileged user, without the
    verifier's environment.

    The code runs as uid and gid `NOBODY` with no supplementary groups: it may write the
    workspace (handed over on first use), but neither the reward directory nor these verifier
    files, and it cannot signal this checker.

    Raises:
        PermissionError: the checker is not root, so it cannot drop privileges (agent code
            is never run with the checker's own rights).
        subprocess.TimeoutExpired: the code ran longer than `timeout` seconds.
    """
    if os.geteuid() != 0:
        raise PermissionError("the verifier must run as root to run agent code unprivileged")
    if not _handed_over:
        _handed_over.append(hand_over(WS))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLAWRL_")}
    return subprocess.run(
        argv,
        cwd=WS,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
    )


def py(code: str, timeout: float = 20.0) -> Any:
    """Run `code` with the workspace on sys.path; it must print one JSON value."""
    proc = run([sys.executable, "-c", "import sys; sys.path.insert(0, '.')\n" + code], timeout)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-500:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def frac(good: int, total: int) -> float:
    return good / total if total else 0.0


from html.parser import HTMLParser


class Report(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, dict[str, str | None]]] = []
        self.title = self.h1 = self.summary = ""
        self.rows: list[list[str]] = []
        self.in_runs = False
        self.cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.stack.append((tag, a))
        if tag == "table" and a.get("id") == "runs":
            self.in_runs = True
        elif self.in_runs and tag == "tr":
            self.rows.append([])
        elif self.in_runs and tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self.in_runs = False
        if tag in ("td", "th") and self.cell is not None and self.rows:
            self.rows[-1].append("".join(self.cell).strip())
            self.cell = None
        while self.stack:
            if self.stack.pop()[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        tags = [t for t, _ in self.stack]
        if "title" in tags:
            self.title += data
        if "h1" in tags:
            self.h1 += data
        if any(t == "p" and a.get("id") == "summary" for t, a in self.stack):
            self.summary += data
        if self.cell is not None:
            self.cell.append(data)


ROWS = [
    ["Name", "Latency (ms)", "Status"],
    ["parse <small>", "12.5", "PASS"],
    ["warm start", "40.0", "FAIL"],
    ["render & diff", "48.25", "PASS"],
    ["parse large", "310.0", "FAIL"],
    ["cold start", "901.0", "PASS"],
]


def report() -> Report:
    r = Report()
    r.feed(read("output/report.html"))
    return r


def norm(rows: list[list[str]]) -> list[list[str]]:
    out = []
    for row in rows:
        if len(row) == 3 and row[0] != "Name":
            row = [row[0], str(float(row[1])), row[2]]
        out.append(row)
    return out


def checks() -> dict[str, Callable[[], object]]:
    return {
        "title_h1": lambda: "Benchmark report" in report().title and "Benchmark report" in report().h1,
        "table_rows": lambda: frac(sum(r in norm(report().rows) for r in ROWS), len(ROWS)),
        "sorted_escaped": lambda: norm(report().rows) == ROWS and "<small>" not in read("output/report.html"),
        "summary": lambda: " ".join(report().summary.split()) == "3 of 5 runs passed",
    }


def safe(check: Callable[[], object]) -> float:
    try:
        value = float(check())  # type: ignore[arg-type]
    except Exception:
        return 0.0
    return min(1.0, max(0.0, value))


if __name__ == "__main__":
    scores = {name: safe(check) for name, check in checks().items()}
    (OUT / "reward.json").write_text(json.dumps(scores))
