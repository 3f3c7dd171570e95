"""Verifier of built-in task `log_rotate_script`: named sub-scores in [0, 1] -> reward.json."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import tempfile
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


import shutil
import stat


def read_bytes_nofollow(rel: str) -> bytes:
    """The bytes of the regular file `rel` directly in the workspace, opened without
    following a symlink (agent code, which owns the workspace, may have swapped it since
    `path()` looked) and without blocking on a FIFO."""
    fd = os.open(WS / rel, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ValueError(f"{rel} is not a regular file")
        return f.read()


def run_on_fresh(n: int) -> list[str]:
    # Built as root in a root-owned dir outside the workspace that the unprivileged user
    # may pass through (0711) but not list, rename or write: agent code left running by an
    # earlier call cannot swap the tree for a symlink while root writes it.
    tmp = Path(tempfile.mkdtemp(prefix="clawrl-check-", dir=WS.parent))
    try:
        tmp.chmod(0o711)
        d = tmp / "t"
        d.mkdir()
        for day in ["2025-01-05", "2025-03-01", "2024-12-31", "2025-02-10"]:
            (d / f"service-{day}.log").write_text(day)
        (d / "notes.md").write_text("x")
        (d / "sub").mkdir()
        (d / "sub" / "service-2020-01-01.log").write_text("x")
        script = tmp / "rotate.sh"
        script.write_bytes(read_bytes_nofollow("rotate.sh"))
        hand_over(d)  # the script (run unprivileged) deletes files in there
        proc = run(["bash", str(script), str(d), str(n)])
        assert proc.returncode == 0, proc.stderr
        return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def keeps_newest() -> bool:
    return run_on_fresh(2) == [
        "notes.md", "service-2025-02-10.log", "service-2025-03-01.log", "sub/service-2020-01-01.log"
    ]


def checks() -> dict[str, Callable[[], object]]:
    return {
        "executable": lambda: os.access(path("rotate.sh"), os.X_OK),
        "ran_on_logs": lambda: sorted(p.name for p in path("logs").iterdir())
        == ["README.txt", "service-2026-11-01.log", "service-2026-11-02.log", "service-2026-11-03.log"],
        "keeps_newest_by_name": keeps_newest,
        # deleting nothing when N is large only counts from a script that does rotate:
        # a script that never deletes would pass it vacuously
        "n_larger_than_count": lambda: len(run_on_fresh(10)) == 6 and keeps_newest(),
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
