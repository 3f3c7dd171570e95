"""The ClawGym-Bench layout: its loader, the suite's Python image and its checkers' JSON
sub-scores.

**The layout.** ``data_entry.json`` (``task_id``, ``user_query``, ``input_mount_dir``),
``input_files/``, ``reward/check.py`` and ``reward/reward.sh`` (prints the reward as its last
line); optional ``solution/solve.sh`` (our extension).

**The ClawGym image.** ClawGym tasks assume a Python environment with the packages their
files import (a checker imports ``yaml``, a prompt says ``python -m pytest``, an input
script imports ``pandas``), which the default sandbox root lacks. :func:`scan_imports`
reads a task directory's Python files with :mod:`ast` (``reward/check.py``,
``input_files/**/*.py``) and its prompt (``import X`` / ``from X import`` lines, ``python -m
X``), keeps the top-level module names that are neither standard library
(:data:`sys.stdlib_module_names`) nor shipped with the task (a ``X.py`` or ``X/`` under
``input_files/``), and maps them through :data:`DEBIAN_PACKAGES` (Debian bookworm's
``python3-*``) or :data:`PIP_PACKAGES` (PyPI names for what bookworm lacks). A name in
neither table is *not* installed — it is reported as unresolved (a task's own module that
the agent is to write, e.g. ``compute``, must never become a PyPI download).
:func:`clawgym_dockerfile` writes the Dockerfile (``FROM python:3`` — the local bookworm
base of :mod:`clawrl.bench.base_images`, which has ``python``, ``python3``, ``pip`` — then
``apt-get install`` and ``pip install`` in ``RUN`` steps, which have the registries'
network); :func:`with_clawgym_image` stages it (content-addressed, so a suite with the
same packages reuses one image) and points the tasks' :attr:`~clawrl.bench.Task.dockerfile`
at it. The rollout runner builds it as any task image (cached by digest; a failed build is
an ``env-error``); ``bench --no-task-images`` runs ClawGym tasks in the default root.

**Checker sub-scores.** ClawGym's ``reward.sh`` pipes ``check.py``'s JSON into a one-liner
that prints only the mean, so the loader's verifier command first runs ``check.py`` with
its output in ``/logs/verifier/checker.json``, then ``reward.sh`` (whose last stdout line
stays the reward). :func:`checker_subscores` maps what real checkers print to sub-scores in
[0, 1]: numbers in [0, 1], booleans (1 / 0), ``"pass"``/``"fail"`` words and numeric
strings; nested objects flatten to ``a.b`` names; an object holding a ``passed`` / ``score``
/ … entry is one check; lists give ``name[i]``, or ``name.<id>`` for objects with a
``name`` / ``id`` / … entry. The top-level ``reward`` entry (the checker's own total) is
not a sub-score. Entries that are not scores (counts, ``null``, free text, out of range)
are skipped and listed in the returned notes — sub-scores are informational, the reward is
``reward.sh``'s.
"""

from __future__ import annotations

import ast
import json
import math
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from clawrl.bench.errors import TaskLoadError
from clawrl.bench.staging import stage_files
from clawrl.bench.task import (
    REWARD_MOUNT,
    SOLUTION_MOUNT,
    UNPRIVILEGED_USER,
    Layout,
    Task,
    VerifierSpec,
    WorkspaceSource,
)
from clawrl.bench.tasks.base import TaskLayout, make_task
from clawrl.bench.tasks.files import read_text, solution_spec

__all__ = [
    "CHECKER_JSON",
    "DEBIAN_PACKAGES",
    "PIP_PACKAGES",
    "VERIFY_SCRIPT",
    "ClawGymLayout",
    "ImportScan",
    "checker_subscores",
    "clawgym_dockerfile",
    "last_json_value",
    "load_clawgym",
    "scan_imports",
    "with_clawgym_image",
]

#: File name (under ``/logs/verifier``) of the checker's JSON output.
CHECKER_JSON = "checker.json"

#: ClawGym's verifier (``bash -c VERIFY_SCRIPT clawgym-verify <reward dir> <workspace>``):
#: ``check.py``'s JSON into ``checker.json`` (sub-scores; ClawGym's ``reward.sh`` prints
#: only the mean), then ``reward.sh`` itself, whose last stdout line is the reward.
VERIFY_SCRIPT = (
    f'if [ -f "$1/check.py" ]; then python3 "$1/check.py" "$2" > {REWARD_MOUNT}/{CHECKER_JSON} '
    f'2> {REWARD_MOUNT}/checker.stderr || true; fi; exec bash "$1/reward.sh"'
)

#: import name -> Debian bookworm package (``apt-cache policy`` checked for each).
DEBIAN_PACKAGES: dict[str, str] = {
    "numpy": "python3-numpy",
    "pandas": "python3-pandas",
    "yaml": "python3-yaml",
    "pytest": "python3-pytest",
    "bs4": "python3-bs4",
    "PIL": "python3-pil",
    "requests": "python3-requests",
    "dateutil": "python3-dateutil",
    "matplotlib": "python3-matplotlib",
    "scipy": "python3-scipy",
    "sklearn": "python3-sklearn",
    "lxml": "python3-lxml",
    "jinja2": "python3-jinja2",
    "toml": "python3-toml",
    "pytz": "python3-tz",
    "xlrd": "python3-xlrd",
    "openpyxl": "python3-openpyxl",
    "xlsxwriter": "python3-xlsxwriter",
    "docx": "python3-docx",
    "pypdf": "python3-pypdf",
    "PyPDF2": "python3-pypdf2",
    "fitz": "python3-fitz",
    "reportlab": "python3-reportlab",
    "markdown": "python3-markdown",
    "html2text": "python3-html2text",
    "tabulate": "python3-tabulate",
    "jsonschema": "python3-jsonschema",
    "networkx": "python3-networkx",
    "chardet": "python3-chardet",
    "dateparser": "python3-dateparser",
    "icalendar": "python3-icalendar",
    "feedparser": "python3-feedparser",
    "pydantic": "python3-pydantic",
    "click": "python3-click",
    "rich": "python3-rich",
    "tomli": "python3-tomli",
    "ruamel": "python3-ruamel.yaml",
    "dotenv": "python3-dotenv",
    "sympy": "python3-sympy",
    "statsmodels": "python3-statsmodels",
    "seaborn": "python3-seaborn",
    "httpx": "python3-httpx",
    "tqdm": "python3-tqdm",
    "unidecode": "python3-unidecode",
    "arrow": "python3-arrow",
    "holidays": "python3-holidays",
    "babel": "python3-babel",
    "flask": "python3-flask",
    "sqlalchemy": "python3-sqlalchemy",
    "psutil": "python3-psutil",
    "qrcode": "python3-qrcode",
    "xmltodict": "python3-xmltodict",
    "simplejson": "python3-simplejson",
}

#: import name -> PyPI name, for what bookworm does not package.
PIP_PACKAGES: dict[str, str] = {
    "pptx": "python-pptx",
    "frontmatter": "python-frontmatter",
    "markdownify": "markdownify",
    "tzdata": "tzdata",
}

_PROMPT_IMPORT = re.compile(r"^\s*(?:from\s+([A-Za-z_]\w*)[\w.]*\s+import|import\s+([A-Za-z_]\w*))")
_PROMPT_DASH_M = re.compile(r"\bpython3?\s+-m\s+([A-Za-z_]\w*)")
_STAGE_VERSION = "clawgym-image-1"
_MAX_SUBSCORES = 256
_MAX_DEPTH = 4
_RESULT_KEYS = ("passed", "pass", "ok", "success", "score", "result", "value")
_NAME_KEYS = ("name", "id", "check", "test", "key", "criterion", "title")
_WORDS = {"pass": 1.0, "passed": 1.0, "ok": 1.0, "true": 1.0, "yes": 1.0, "success": 1.0,
          "fail": 0.0, "failed": 0.0, "false": 0.0, "no": 0.0, "error": 0.0}  # fmt: skip


@dataclass(frozen=True)
class ImportScan:
    """What :func:`scan_imports` found.

    Attributes:
        debian: Debian packages to install (sorted).
        pip: PyPI packages to install (sorted).
        unresolved: third-party-looking import names in neither table (not installed).
        unparsable: Python files that :mod:`ast` could not parse (relative paths).
    """

    debian: tuple[str, ...] = ()
    pip: tuple[str, ...] = ()
    unresolved: tuple[str, ...] = ()
    unparsable: tuple[str, ...] = field(default_factory=tuple)


def _file_imports(source: str) -> set[str]:
    """Top-level names of the absolute imports in ``source`` (``SyntaxError`` propagates)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _prompt_imports(text: str) -> set[str]:
    names = {m.group(1) for m in _PROMPT_DASH_M.finditer(text)}
    for line in text.splitlines():
        m = _PROMPT_IMPORT.match(line)
        if m:
            names.add(m.group(1) or m.group(2))
    return names


def _local_modules(inputs: Path) -> set[str]:
    """Module names a task ships: every ``X.py`` and directory name under ``inputs``."""
    if not inputs.is_dir():
        return set()
    return {
        p.stem if p.suffix == ".py" else p.name
        for p in inputs.rglob("*")
        if p.is_dir() or p.suffix == ".py"
    }


def scan_imports(task_dirs: Iterable[Path]) -> ImportScan:
    """The packages the ClawGym task directories ``task_dirs`` import (see the module
    docstring); never raises for a file it cannot read or parse (listed in ``unparsable``)."""
    wanted: set[str] = set()
    unparsable: list[str] = []
    for root in task_dirs:
        found: set[str] = set()
        files = [root / "reward" / "check.py", *sorted((root / "input_files").rglob("*.py"))]
        for path in files:
            if not path.is_file():
                continue
            try:
                found |= _file_imports(path.read_text(encoding="utf-8"))
            except (SyntaxError, ValueError, OSError, UnicodeDecodeError):
                unparsable.append(f"{root.name}/{path.relative_to(root)}")
        try:
            entry = json.loads((root / "data_entry.json").read_text(encoding="utf-8"))
            found |= _prompt_imports(str(entry.get("user_query", "")))
        except (ValueError, OSError, UnicodeDecodeError, AttributeError):
            pass
        wanted |= found - _local_modules(root / "input_files")
    third = {n for n in wanted if n not in sys.stdlib_module_names and not n.startswith("_")}
    return ImportScan(
        debian=tuple(sorted({DEBIAN_PACKAGES[n] for n in third if n in DEBIAN_PACKAGES})),
        pip=tuple(sorted({PIP_PACKAGES[n] for n in third if n in PIP_PACKAGES})),
        unresolved=tuple(sorted(n for n in third if n not in DEBIAN_PACKAGES | PIP_PACKAGES)),
        unparsable=tuple(unparsable),
    )


def clawgym_dockerfile(scan: ImportScan, mount_dirs: Iterable[str] = ()) -> str:
    """The Dockerfile of the ClawGym image for ``scan`` (``FROM python:3``, the Debian
    packages, then the PyPI ones; ``mount_dirs`` are created so the workspace mount
    point exists)."""
    lines = [
        "# clawrl: ClawGym image (clawrl.bench.clawgym), from the suite's imports",
        "FROM python:3",
    ]
    if scan.debian:
        lines.append(
            "RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
            f"--no-install-recommends {' '.join(scan.debian)} && rm -rf /var/lib/apt/lists/*"
        )
    if scan.pip:
        lines.append(f"RUN pip install --no-cache-dir {' '.join(scan.pip)}")
    dirs = sorted(set(mount_dirs))
    if dirs:
        lines.append(f"RUN mkdir -p {' '.join(dirs)}")
    return "\n".join(lines) + "\n"


def with_clawgym_image(tasks: list[Task]) -> list[Task]:
    """``tasks`` with every ClawGym task pointed at one ClawGym image built from the
    imports of all of them (other tasks unchanged; no ClawGym task: ``tasks`` itself).

    Raises:
        OSError: the staging cache cannot be written.
    """
    gym = [t for t in tasks if t.layout is Layout.CLAWGYM]
    if not gym:
        return tasks
    scan = scan_imports(t.root for t in gym)
    text = clawgym_dockerfile(scan, (t.workspace_path for t in gym))
    context = stage_files("clawgym", _STAGE_VERSION, {"Dockerfile": text.encode()})
    note = f"ClawGym image: apt {list(scan.debian)}, pip {list(scan.pip)}"
    if scan.unresolved:
        note += f"; imports not installed (not in the table): {list(scan.unresolved)}"
    out = []
    for t in tasks:
        if t.layout is Layout.CLAWGYM:
            t = t.model_copy(
                update={
                    "dockerfile": context / "Dockerfile",
                    "build_context": context,
                    "image": "python:3",
                    "notes": (*(n for n in t.notes if not n.startswith("ClawGym image:")), note),
                }
            )
        out.append(t)
    return out


# ------------------------------------------------------------------ sub-scores


def last_json_value(text: str) -> Any:
    """The whole of ``text`` as JSON, else the last JSON object or array that starts a
    line and runs to the end of its document (``indent=2`` output included).

    Raises:
        ValueError: no JSON document is found (a document nested too deeply for the JSON
            decoder, whose RecursionError is caught, counts as none).
    """
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        pass
    decoder = json.JSONDecoder()
    starts = [m.start(1) for m in re.finditer(r"^[ \t]*([\[{])", text, re.MULTILINE)]
    for start in reversed(starts):
        try:
            value, _ = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            continue
        return value
    raise ValueError("no JSON object or array found")


def _scalar(value: Any) -> float | str:
    """A score in [0, 1], else why ``value`` is not one."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _WORDS:
            return _WORDS[word]
        try:
            value = float(word)
        except ValueError:
            return f"text {value[:40]!r} is not a score"
    if isinstance(value, int | float):
        number = float(value)
        if not math.isfinite(number) or not 0.0 <= number <= 1.0:
            return f"{value!r} is outside [0, 1]"
        return number
    return f"{type(value).__name__} is not a score"


def _walk(name: str, value: Any, subs: dict[str, float], skipped: list[str], depth: int) -> None:
    if isinstance(value, dict):
        result = next((k for k in _RESULT_KEYS if k in value), None)
        if result is not None and not isinstance(value[result], dict | list):
            _walk(name, value[result], subs, skipped, depth)
        elif depth >= _MAX_DEPTH:
            skipped.append(f"{name}: nested deeper than {_MAX_DEPTH}")
        else:
            for k, v in value.items():
                _walk(f"{name}.{k}", v, subs, skipped, depth + 1)
        return
    if isinstance(value, list):
        if depth >= _MAX_DEPTH:
            skipped.append(f"{name}: nested deeper than {_MAX_DEPTH}")
            return
        for i, item in enumerate(value):
            label = next(
                (item[k] for k in _NAME_KEYS if isinstance(item, dict) and k in item), None
            )
            child = f"{name}.{label}" if isinstance(label, str | int) else f"{name}[{i}]"
            _walk(child, item, subs, skipped, depth + 1)
        return
    score = _scalar(value)
    if isinstance(score, str):
        skipped.append(f"{name}: {score}")
    elif len(subs) >= _MAX_SUBSCORES:
        skipped.append(f"{name}: over {_MAX_SUBSCORES} sub-scores")
    else:
        subs[name] = score


def checker_subscores(data: Any) -> tuple[dict[str, float], list[str]]:
    """Sub-scores in [0, 1] from a checker's parsed JSON ``data`` (see the module
    docstring), and one note per entry or shape that was skipped. Never raises."""
    if isinstance(data, bool) or not isinstance(data, dict | list):
        what = "a bare number" if isinstance(data, int | float) else type(data).__name__
        return {}, [f"the checker's JSON is {what}, not an object of checks"]
    subs: dict[str, float] = {}
    skipped: list[str] = []
    items = data.items() if isinstance(data, dict) else [("checks", data)]
    for key, value in items:
        if key != "reward":
            _walk(str(key), value, subs, skipped, 1 if isinstance(value, dict | list) else 0)
    return subs, skipped


# ------------------------------------------------------------------- the loader


def load_clawgym(root: Path) -> Task:
    try:
        entry = json.loads(read_text(root, "data_entry.json"))
    except json.JSONDecodeError as exc:
        raise TaskLoadError(root, f"data_entry.json is not valid JSON: {exc}") from exc
    if not isinstance(entry, dict):
        raise TaskLoadError(root, "data_entry.json must hold a JSON object")
    for key in ("task_id", "user_query", "input_mount_dir"):
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise TaskLoadError(root, f"data_entry.json: `{key}` must be a non-empty string")
    mount = PurePosixPath(entry["input_mount_dir"])
    if not mount.is_absolute() or ".." in mount.parts:
        raise TaskLoadError(root, "data_entry.json: `input_mount_dir` must be an absolute path")
    reward = root / "reward"
    if not (reward / "reward.sh").is_file():
        raise TaskLoadError(root, "ClawGym layout: reward/reward.sh is missing")
    inputs = root / "input_files"
    sources = (WorkspaceSource(src=inputs, dest="."),) if inputs.is_dir() else ()
    metadata = {k: v for k, v in entry.items() if k not in ("task_id", "user_query")}
    raw_meta = entry.get("metadata")
    nested: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    category = entry.get("category", nested.get("category"))
    difficulty = entry.get("difficulty", nested.get("difficulty"))
    return make_task(
        id=entry["task_id"],
        instruction=entry["user_query"].strip(),
        category=category,
        difficulty=difficulty,
        layout=Layout.CLAWGYM,
        root=root,
        workspace_path=str(mount),
        workspace_sources=sources,
        verifier=VerifierSpec(
            files_dir=reward,
            mount_path=str(mount / "reward"),
            command=(
                "bash",
                "-c",
                VERIFY_SCRIPT,
                "clawgym-verify",
                str(mount / "reward"),
                str(mount),
            ),
            reward_channel="stdout",
            subscores_file=CHECKER_JSON,
            user=UNPRIVILEGED_USER,
        ),
        solution=solution_spec(root, ("bash", f"{SOLUTION_MOUNT}/solve.sh")),
        metadata=metadata,
    )


class ClawGymLayout(TaskLayout):
    """ClawGym-Bench: a ``data_entry.json``; one ClawGym image for the suite's tasks, and
    the checker's JSON as sub-scores."""

    name = Layout.CLAWGYM.value

    def detect(self, path: Path) -> bool:
        return (path / "data_entry.json").is_file()

    def load(self, path: Path) -> Task:
        return load_clawgym(path)

    def finish(self, tasks: list[Task]) -> list[Task]:
        return with_clawgym_image(tasks)

    def subscores(self, text: str) -> tuple[dict[str, float], list[str]]:
        return checker_subscores(last_json_value(text))
