"""Verifier of built-in task `ini_parser`: named sub-scores in [0, 1] -> reward.json."""

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


def parse(text: str) -> Any:
    return py(
        "import json, iniparse\n"
        "try:\n"
        f"    print(json.dumps(iniparse.parse_ini({text!r})))\n"
        "except iniparse.IniError as e:\n"
        "    print(json.dumps({'error': str(e)}))\n"
    )


BASIC = "[server]\nhost = example.org\nPort=8080\n\n[client]\nretries: 3\n"
EDGE = "top = 1\n  # comment\n; also comment\n[ a ]\nurl = http://x/?q=1\nk=1\nK = 2\n[b]\nz=9\n[a]\nm: x=y\n"


def checks() -> dict[str, Callable[[], object]]:
    return {
        "basic": lambda: parse(BASIC) == {"server": {"host": "example.org", "port": "8080"}, "client": {"retries": "3"}},
        "comments_and_root": lambda: parse(EDGE)[""] == {"top": "1"},
        "merge_and_override": lambda: parse(EDGE)["a"] == {"url": "http://x/?q=1", "k": "2", "m": "x=y"}
        and parse(EDGE)["b"] == {"z": "9"}
        and "" not in parse(BASIC),
        "errors": lambda: "line 3" in parse("[s]\na=1\nnot a pair\n").get("error", "")
        and "line 1" in parse("[broken\n").get("error", ""),
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
