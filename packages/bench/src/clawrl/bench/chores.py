"""Workspace chores: a multi-step task family with exact rewards, in ClawGym's layout.

Each instance is a small chore on a few workspace files that takes a handful of tool
calls (look, read, transform, write). Six templates:

* ``log_value`` — copy one field of the only ``ERROR`` line of a log into ``answer.txt``;
* ``count_matches`` — count the lines of a file that contain a text, into ``count.txt``;
* ``sum_column`` — sum the ``amount`` column of a CSV, into ``total.txt``;
* ``csv_to_json`` — convert a CSV to a JSON list of objects (one integer column);
* ``config_key`` — change one key of a JSON config, leaving every other key unchanged;
* ``rename_files`` — rename the files of a folder by a rule (new extension, or a prefix).

**Exact reward.** ``reward/check.py`` holds the expected result, computed at generation
time (it never recomputes it from the workspace, whose inputs the agent may have edited),
and reads only the answer paths: each must be a regular file reached through real
directories (a symlink, a directory, a FIFO, a file over 64 KiB: not an answer), decoded as
UTF-8; text answers are compared after stripping surrounding whitespace, JSON answers by
value with types kept (``30`` is not ``"30"`` nor ``30.0``; duplicate keys, ``NaN``:
rejected); a renamed folder must hold exactly the expected names and contents, nothing
more. It prints its checks as JSON (the sub-scores, informational) and never raises: any
failure is a check that fails. ``reward/reward.sh`` prints ``1`` iff every check passes,
else ``0``. ``solution/solve.sh`` is the oracle; it computes the answer from the inputs.

**Splits.** An instance is drawn from its template's parameter pools by a seeded RNG; its
split is a hash of its content (template, instruction and input files): about 25 % are
``heldout``, the rest ``train``. A draw keeps only instances of the requested split, so the
two splits never share an instance whatever the seeds. ``n`` instances are spread over the
templates in turn (instance ``i`` has template ``templates[i % len(templates)]``).

Command line (writes the task directories, one per instance, and prints their ids)::

    python -m clawrl.bench.chores_cli DEST --split heldout --n 12 --seed 0 [--template T ...]
"""

from __future__ import annotations

import hashlib
import json
import random
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from clawrl.bench.task import Task
from clawrl.bench.tasks.loading import load_task

__all__ = [
    "CHORE_TEMPLATES",
    "ChoreInstance",
    "chore_instances",
    "generate_chore_tasks",
]

Split = Literal["train", "heldout"]

#: The templates, in the order ``n`` instances are spread over them.
CHORE_TEMPLATES: tuple[str, ...] = (
    "log_value",
    "count_matches",
    "sum_column",
    "csv_to_json",
    "config_key",
    "rename_files",
)
#: Workspace of every instance (ClawGym's ``input_mount_dir``).
WORKSPACE = "/root/.openclaw/workspace"
_HELDOUT_PERCENT = 25
_MAX_N = 10_000
_MAX_DRAWS = 200

_NAMES = ("alice", "bruno", "chen", "dara", "emeka", "farah", "goran", "hana", "ivo", "jun",
          "kofi", "lena", "mateo", "nadia", "omar", "priya", "quinn", "rosa", "sven", "tariq",
          "uma", "vera", "wei", "xena", "yusuf", "zoe")  # fmt: skip
_CITIES = ("Oslo", "Lima", "Cairo", "Quito", "Dakar", "Perth", "Riga", "Hanoi", "Porto",
           "Accra", "Kyoto", "Tunis", "Bern", "Sofia", "Davao", "Cusco")  # fmt: skip
_ITEMS = ("bolt", "cable", "drill", "fuse", "gasket", "hinge", "lamp", "nail", "pliers",
          "rivet", "saw", "tape", "valve", "washer", "wrench", "clamp")  # fmt: skip
_TEAMS = ("red", "blue", "green", "gold", "gray", "teal")
_PATHS = ("/login", "/cart", "/search", "/api/users", "/api/orders", "/health", "/checkout",
          "/profile", "/upload", "/settings")  # fmt: skip
# none is a substring of another (count_matches counts lines containing the text)
_EVENTS = ("timeout", "refused", "expired", "dropped", "throttled", "rejected", "stalled",
           "corrupt", "denied", "skipped", "queued", "resumed")  # fmt: skip
_JOBS = ("backup", "import", "export", "sync", "index", "report", "cleanup", "billing")
_STEMS = ("intro", "budget", "agenda", "minutes", "summary", "plan", "draft", "review",
          "ideas", "todo", "recap", "goals", "memo", "outline")  # fmt: skip
_WORDS = ("apple", "river", "stone", "cloud", "maple", "ocean", "piano", "lemon", "forest",
          "silver", "garden", "rocket", "window", "summer", "harbor", "island")  # fmt: skip


@dataclass
class ChoreInstance:
    """One chore: its ``template``, ``instruction``, input ``files`` (relative path ->
    text), the ``spec`` its checker compares against, and its oracle ``solve`` script
    (bash, run in the workspace)."""

    template: str
    instruction: str
    files: dict[str, str]
    spec: dict[str, Any]
    solve: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        """sha256 of the content (template, instruction, input files): the split's key."""
        blob = json.dumps([self.template, self.instruction, sorted(self.files.items())])
        return hashlib.sha256(blob.encode()).hexdigest()

    @property
    def split(self) -> Split:
        """``heldout`` for about 25 % of contents, else ``train`` (a pure function of
        :attr:`digest`)."""
        return "heldout" if int(self.digest[:8], 16) % 100 < _HELDOUT_PERCENT else "train"

    @property
    def demonstration(self) -> list[str]:
        """A worked solution as shell commands, run in the workspace: look at the input,
        do the chore (the oracle's own commands), look at the result. Cold-start data for
        any harness with a shell tool (:func:`clawrl.bench.harness.demonstration_turns`)."""
        inputs = sorted(self.files)
        if self.spec["kind"] == "tree":
            look = check = f"ls {shlex.quote(self.spec['path'])}"
        else:
            look = f"cat {shlex.quote(inputs[0])}"
            check = f"cat {shlex.quote(self.spec['path'])}"
        return [look, self.solve.rstrip("\n"), check]

    @property
    def task_id(self) -> str:
        """Stable id: ``chores-<template>-<first 10 hex digits of the digest>``."""
        return f"chores-{self.template.replace('_', '-')}-{self.digest[:10]}"


# ------------------------------------------------------------------ templates


def _time(rng: random.Random, i: int) -> str:
    return f"2024-0{rng.randint(1, 9)}-{rng.randint(10, 28)} 0{i % 10}:{rng.randint(10, 59)}:{rng.randint(10, 59)}"


def _log_value(rng: random.Random) -> ChoreInstance:
    name = rng.choice(("service", "app", "server", "worker", "gateway"))
    path = f"logs/{name}.log"
    n = rng.randint(8, 16)
    err = rng.randrange(1, n - 1)
    lines, rows = [], []
    used: set[str] = set()
    for i in range(n):
        rid = f"r{rng.randint(1000, 9999)}"
        while rid in used:
            rid = f"r{rng.randint(1000, 9999)}"
        used.add(rid)
        row = {
            "id": rid,
            "user": rng.choice(_NAMES),
            "path": rng.choice(_PATHS),
            "status": str(rng.choice((200, 201, 204, 301, 400, 403, 404, 500, 502, 503))),
            "ms": str(rng.randint(3, 2500)),
        }
        level = "ERROR" if i == err else rng.choice(("INFO", "INFO", "INFO", "DEBUG", "WARN"))
        rows.append(row)
        fields = " ".join(f"{k}={row[k]}" for k in ("id", "user", "path", "status", "ms"))
        lines.append(f"{_time(rng, i)} {level:<5} request {fields}")
    key = rng.choice(("id", "user", "path", "status", "ms"))
    answer = rows[err][key]
    instruction = (
        f"The log file {path} has exactly one line at level ERROR. Write the value of that "
        f"line's `{key}` field (only the value, e.g. for `{key}=X` write X) to the file "
        "answer.txt in the workspace."
    )
    solve = f"grep ' ERROR ' {path} | grep -o ' {key}=[^ ]*' | cut -d= -f2 > answer.txt\n"
    return ChoreInstance(
        "log_value",
        instruction,
        {path: "\n".join(lines) + "\n"},
        {"kind": "text", "path": "answer.txt", "expected": answer},
        solve,
        {"key": key},
    )


def _count_matches(rng: random.Random) -> ChoreInstance:
    name = rng.choice(("events", "jobs", "history", "activity"))
    path = f"data/{name}.txt"
    target = rng.choice(_EVENTS)
    others = [e for e in _EVENTS if e != target]
    k = rng.randint(2, 12)  # a guessed constant seldom scores
    n = rng.randint(k + 6, 28)
    hits = set(rng.sample(range(n), k))
    lines = [
        f"{_time(rng, i)} job={rng.choice(_JOBS)} "
        f"{target if i in hits else rng.choice(others)} attempt={rng.randint(1, 5)}"
        for i in range(n)
    ]
    assert sum(target in line for line in lines) == k
    instruction = (
        f"Count the lines of {path} that contain the text `{target}`, and write that number "
        "(only the number) to the file count.txt in the workspace."
    )
    return ChoreInstance(
        "count_matches",
        instruction,
        {path: "\n".join(lines) + "\n"},
        {"kind": "text", "path": "count.txt", "expected": str(k)},
        f"grep -c -F -- '{target}' {path} > count.txt\n",
        {"target": target},
    )


def _sum_column(rng: random.Random) -> ChoreInstance:
    name = rng.choice(("sales", "orders", "expenses", "invoices"))
    path = f"data/{name}.csv"
    n = rng.randint(4, 8)
    amounts = [rng.randint(1, 500) for _ in range(n)]
    rows = ["date,item,amount"] + [
        f"2024-0{rng.randint(1, 9)}-{rng.randint(10, 28)},{rng.choice(_ITEMS)},{a}" for a in amounts
    ]
    instruction = (
        f"The CSV file {path} has a header line and an `amount` column. Write the sum of "
        "the amount column (an integer, only the number) to the file total.txt in the "
        "workspace."
    )
    solve = (
        "python3 - <<'PY'\nimport csv\n"
        f"rows = list(csv.DictReader(open({path!r})))\n"
        "open('total.txt', 'w').write(str(sum(int(r['amount']) for r in rows)) + '\\n')\nPY\n"
    )
    return ChoreInstance(
        "sum_column",
        instruction,
        {path: "\n".join(rows) + "\n"},
        {"kind": "text", "path": "total.txt", "expected": str(sum(amounts))},
        solve,
    )


_SCHEMAS: tuple[tuple[str, tuple[str, str, str], str], ...] = (
    ("people", ("name", "age", "city"), "age"),
    ("stock", ("item", "qty", "shelf"), "qty"),
    ("scores", ("player", "points", "team"), "points"),
)


def _csv_to_json(rng: random.Random) -> ChoreInstance:
    stem, cols, int_col = rng.choice(_SCHEMAS)
    n = rng.randint(2, 4)
    pools = {
        "name": _NAMES, "city": _CITIES, "item": _ITEMS, "player": _NAMES, "team": _TEAMS,
        "shelf": tuple(f"{c}{d}" for c in "ABCD" for d in range(1, 6)),
    }  # fmt: skip
    records = []
    for _ in range(n):
        rec: dict[str, Any] = {}
        for c in cols:
            rec[c] = rng.randint(1, 99) if c == int_col else rng.choice(pools[c])
        records.append(rec)
    src = f"data/{stem}.csv"
    out = f"data/{stem}.json"
    text = (
        ",".join(cols) + "\n" + "".join(",".join(str(r[c]) for c in cols) + "\n" for r in records)
    )
    instruction = (
        f"Convert the CSV file {src} to JSON and save it as {out}: a JSON list with one "
        "object per data row, in the same order, whose keys are the header's column names. "
        f"The `{int_col}` values must be JSON integers; the other values are strings."
    )
    solve = (
        "python3 - <<'PY'\nimport csv, json\n"
        f"rows = list(csv.DictReader(open({src!r})))\n"
        f"for r in rows:\n    r[{int_col!r}] = int(r[{int_col!r}])\n"
        f"json.dump(rows, open({out!r}, 'w'), indent=2)\nPY\n"
    )
    return ChoreInstance(
        "csv_to_json",
        instruction,
        {src: text},
        {"kind": "json", "path": out, "expected": records},
        solve,
    )


def _config_key(rng: random.Random) -> ChoreInstance:
    name = rng.choice(("app", "service", "settings", "server"))
    path = f"config/{name}.json"
    pool: dict[str, Any] = {
        "host": rng.choice(("localhost", "0.0.0.0", "db.internal", "api.local")),
        "port": rng.choice((8000, 8080, 5000, 3000, 9090)),
        "timeout": rng.choice((10, 15, 30, 60)),
        "retries": rng.randint(1, 5),
        "workers": rng.choice((2, 4, 8)),
        "debug": rng.choice((True, False)),
        "log_level": rng.choice(("debug", "info", "warning", "error")),
        "cache_dir": rng.choice(("/tmp/cache", "/var/cache/app", "cache")),
    }
    keys = rng.sample(sorted(pool), rng.randint(4, 6))
    config = {k: pool[k] for k in keys}
    key = rng.choice(keys)
    old = config[key]
    if isinstance(old, bool):
        new: Any = not old
        what = f"to {json.dumps(new)} (a JSON boolean)"
    elif isinstance(old, int):
        new = rng.choice([v for v in range(1, 100) if v != old] if key != "port" else
                         [v for v in (8001, 8081, 5001, 3001, 9091, 7000)])  # fmt: skip
        what = f"from {old} to {new} (a JSON number)"
    else:
        choices = {"host": ("127.0.0.1", "example.org", "db.prod"),
                   "log_level": ("debug", "info", "warning", "error", "critical"),
                   "cache_dir": ("/srv/cache", "/tmp/app-cache", ".cache")}[key]  # fmt: skip
        new = rng.choice([c for c in choices if c != old])
        what = f'from "{old}" to "{new}" (a JSON string)'
    expected = dict(config, **{key: new})
    instruction = (
        f"In the JSON file {path}, change the value of the key `{key}` {what}. Leave every "
        "other key and value unchanged, and keep the file valid JSON."
    )
    solve = (
        "python3 - <<'PY'\nimport json\n"
        f"c = json.load(open({path!r}))\nc[{key!r}] = {new!r}\n"
        f"json.dump(c, open({path!r}, 'w'), indent=2)\nPY\n"
    )
    return ChoreInstance(
        "config_key",
        instruction,
        {path: json.dumps(config, indent=2) + "\n"},
        {"kind": "json", "path": path, "expected": expected},
        solve,
        {"key": key},
    )


_EXT_PAIRS = ((".txt", ".md"), (".log", ".txt"), (".jpeg", ".jpg"), (".htm", ".html"),
              (".yml", ".yaml"))  # fmt: skip
_PREFIXES = ("old_", "done_", "2024_", "archived_")


def _rename_files(rng: random.Random) -> ChoreInstance:
    folder = rng.choice(("notes", "docs", "drafts", "reports", "inbox"))
    src_ext, dst_ext = rng.choice(_EXT_PAIRS)
    other_ext = rng.choice([e for pair in _EXT_PAIRS for e in pair if e not in (src_ext, dst_ext)])
    stems = rng.sample(_STEMS, rng.randint(3, 5))
    n_match = rng.randint(2, len(stems) - 1)
    files: dict[str, str] = {}
    for i, stem in enumerate(stems):
        ext = src_ext if i < n_match else other_ext
        files[f"{stem}{ext}"] = " ".join(rng.sample(_WORDS, 3)) + "\n"
    if rng.random() < 0.5:
        prefix = ""
        rule = (
            f"rename every file whose name ends in {src_ext} so that it ends in {dst_ext} "
            f"instead (for example a{src_ext} becomes a{dst_ext})"
        )

        def renamed(n: str) -> str:
            return n[: -len(src_ext)] + dst_ext if n.endswith(src_ext) else n

        solve = f'for f in {folder}/*{src_ext}; do mv "$f" "${{f%{src_ext}}}{dst_ext}"; done\n'
    else:
        prefix = rng.choice(_PREFIXES)
        rule = (
            f"add the prefix {prefix} to the name of every file whose name ends in {src_ext} "
            f"(for example a{src_ext} becomes {prefix}a{src_ext})"
        )

        def renamed(n: str) -> str:
            return prefix + n if n.endswith(src_ext) else n

        solve = (
            f'for f in {folder}/*{src_ext}; do mv "$f" "{folder}/{prefix}$(basename "$f")"; done\n'
        )
    instruction = (
        f"In the folder {folder}/, {rule}. Keep the files' contents; leave the other files "
        "as they are."
    )
    return ChoreInstance(
        "rename_files",
        instruction,
        {f"{folder}/{n}": t for n, t in sorted(files.items())},
        {"kind": "tree", "path": folder, "expected": {renamed(n): t for n, t in files.items()}},
        solve,
        {"rule": "prefix" if prefix else "extension"},
    )


_MAKERS = {
    "log_value": _log_value,
    "count_matches": _count_matches,
    "sum_column": _sum_column,
    "csv_to_json": _csv_to_json,
    "config_key": _config_key,
    "rename_files": _rename_files,
}


def chore_instances(
    split: Split,
    n: int,
    seed: int = 0,
    *,
    templates: Sequence[str] | None = None,
) -> list[ChoreInstance]:
    """Draw ``n`` distinct instances of ``split`` deterministically from ``seed``, spread
    over ``templates`` (default: :data:`CHORE_TEMPLATES`) in turn.

    Raises:
        ValueError: ``split`` or a template is unknown, ``templates`` is empty or repeats
            one, or ``n`` is not in [0, 10000].
    """
    if split not in ("train", "heldout"):
        raise ValueError(f"unknown split {split!r} (train | heldout)")
    names = list(CHORE_TEMPLATES if templates is None else templates)
    unknown = [t for t in names if t not in _MAKERS]
    if unknown or not names or len(set(names)) != len(names):
        raise ValueError(
            f"templates must be distinct names of {', '.join(CHORE_TEMPLATES)}; got {names}"
        )
    if not 0 <= n <= _MAX_N:
        raise ValueError(f"n must be in [0, {_MAX_N}], got {n}")
    rngs = {t: random.Random(f"chores:{t}:{split}:{seed}") for t in names}
    seen: set[str] = set()
    out: list[ChoreInstance] = []
    for i in range(n):
        template = names[i % len(names)]
        for _ in range(_MAX_DRAWS):
            inst = _MAKERS[template](rngs[template])
            if inst.split == split and inst.digest not in seen:
                break
        else:  # pragma: no cover - the pools are far larger than _MAX_N
            raise ValueError(f"template {template} ran out of distinct {split} instances")
        seen.add(inst.digest)
        out.append(inst)
    return out


_CHECK = r'''"""Exact checker of a chores task (clawrl.bench.chores): python3 check.py WORKSPACE
[--reward]. Prints the checks as JSON, or with --reward only 1 (every check passed) or 0.
Reads only the answer paths; never raises."""
import json
import os
import stat
import sys

SPEC = json.loads(__SPEC__)
CAP = 65536
MAX_ENTRIES = 200


class Bad(Exception):
    pass


def _real_dirs(ws, rel):
    """The path of rel under ws, after checking that each parent is a real directory."""
    parts = [p for p in rel.split("/") if p]
    cur = ws
    for part in parts[:-1]:
        cur = os.path.join(cur, part)
        if not stat.S_ISDIR(os.lstat(cur).st_mode):
            raise Bad(f"{part} is not a directory")
    return os.path.join(cur, parts[-1])


def read_regular(path):
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise Bad("not a regular file")
    if st.st_size > CAP:
        raise Bad("too large")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Bad("not a regular file")
        data = b""
        while len(data) <= CAP:
            chunk = os.read(fd, CAP + 1 - len(data))
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    if len(data) > CAP:
        raise Bad("too large")
    return data.decode("utf-8")


def _no_constants(name):
    raise Bad(f"{name} is not a JSON number")


def _unique(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise Bad("duplicate key")
    return dict(pairs)


def same(a, b):
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def check(ws):
    kind, rel, expected = SPEC["kind"], SPEC["path"], SPEC["expected"]
    checks = {"answer_present": False, "answer_correct": False}
    path = _real_dirs(ws, rel)
    if kind == "tree":
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            raise Bad("not a directory")
        with os.scandir(path) as it:
            names = []
            for entry in it:
                names.append(entry.name)
                if len(names) > MAX_ENTRIES:
                    raise Bad("too many entries")
        checks["answer_present"] = True
        checks["names_match"] = sorted(names) == sorted(expected)
        checks["answer_correct"] = checks["names_match"] and all(
            read_regular(os.path.join(path, n)) == expected[n] for n in expected
        )
        return checks
    text = read_regular(path)
    checks["answer_present"] = True
    if kind == "text":
        checks["answer_correct"] = text.strip() == expected
    else:
        value = json.loads(text, object_pairs_hook=_unique, parse_constant=_no_constants)
        checks["answer_correct"] = same(value, expected)
    return checks


def main():
    checks = {"answer_present": False, "answer_correct": False}
    note = ""
    try:
        checks = check(sys.argv[1])
    except Exception as exc:  # any failure is a failed check, never a crash
        note = f"{type(exc).__name__}: {str(exc)[:200]}"
    reward = 1 if all(checks.values()) else 0
    if "--reward" in sys.argv[2:]:
        print(reward)
    else:
        print(json.dumps({"reward": reward, **checks, "note": note}))


if __name__ == "__main__":
    main()
'''

_REWARD_SH = f"""#!/bin/bash
# Exact reward of a chores task: the last line is 1 iff every check of check.py passes, else 0.
exec python3 -I "$(dirname "$0")/check.py" {WORKSPACE} --reward
"""


def checker_source(spec: dict[str, Any]) -> str:
    """The ``reward/check.py`` of an instance whose checker compares against ``spec``."""
    return _CHECK.replace("__SPEC__", repr(json.dumps(spec, sort_keys=True)))


def write_chore_task(inst: ChoreInstance, task_dir: Path) -> None:
    """Write ``inst`` as a ClawGym task directory ``task_dir`` (created; files replaced)."""
    for sub in ("input_files", "reward", "solution"):
        (task_dir / sub).mkdir(parents=True, exist_ok=True)
    entry = {
        "task_id": inst.task_id,
        "user_query": inst.instruction,
        "input_mount_dir": WORKSPACE,
        "category": "workspace chores",
        "difficulty": "easy",
        "family": "chores",
        "template": inst.template,
        "split": inst.split,
        "demonstration": inst.demonstration,
        **inst.params,
    }
    (task_dir / "data_entry.json").write_text(json.dumps(entry, indent=2) + "\n")
    for rel, text in inst.files.items():
        dest = task_dir / "input_files" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
    (task_dir / "reward" / "check.py").write_text(checker_source(inst.spec))
    (task_dir / "reward" / "reward.sh").write_text(_REWARD_SH)
    (task_dir / "solution" / "solve.sh").write_text(
        f"#!/bin/bash\nset -euo pipefail\ncd {WORKSPACE}\n{inst.solve}"
    )


def generate_chore_tasks(
    dest: Path | str,
    split: Split = "train",
    n: int = 12,
    seed: int = 0,
    *,
    templates: Sequence[str] | None = None,
) -> list[Task]:
    """Write ``n`` instances of ``split`` (see :func:`chore_instances`) as ClawGym task
    directories ``dest/<task id>`` and return them loaded, in draw order.

    Raises:
        ValueError: see :func:`chore_instances`.
        OSError: ``dest`` cannot be written.
    """
    root = Path(dest)
    tasks = []
    for inst in chore_instances(split, n, seed, templates=templates):
        task_dir = root / inst.task_id
        write_chore_task(inst, task_dir)
        tasks.append(load_task(task_dir))
    return tasks
