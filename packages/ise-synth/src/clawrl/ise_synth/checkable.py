"""Checkable intents: ISE intents whose success is verified by execution.

The 4D intents of :mod:`clawrl.ise_synth.sampling` say *what kind* of work a person wants
("summarise the key findings of a long report") but name no files, so nothing can check
whether an agent did it. A *checkable intent* is drawn from the same Persona × Domain × Task ×
Complexity structure, restricted to work the offline sandbox can execute, and carries:

* ``workspace``: the files placed in ``/workspace`` before the agent starts
  (``[{"path", "content"}]``);
* ``checks``: success criteria on the final workspace, each ``{"kind", "path", "text"}``:
  ``equals`` (the regular file's content, stripped, equals ``text`` stripped), ``lines``
  (its non-blank lines, stripped, equal those of ``text``), ``json_key`` (the file is a
  JSON object whose key ``text[0]`` equals ``text[1]``; ``text`` is a JSON array) and
  ``absent`` (nothing at ``path``);
* ``solution``: a bash script that does the work (the oracle);
* ``steps``: the request's steps, one sentence each; ``split``: ``train`` or ``heldout``;
* ``demonstration``: a worked solution as shell commands, step by step (look at the step's
  input, do it, then look at the results): cold-start data for any harness with a shell
  tool, like the chores family's (bench's ``demonstration_turns``).

Complexity sets the number of steps (simple 1, medium 2, complex 3, each from a different
step kind); the persona sets the register (the template renderer's openers). Draw ``i`` of
split ``s`` with seed ``k`` depends only on ``(k, s, i)``, and the two splits use disjoint
random streams, so held-out intents are never seen by a synthesis run over the train split.

:data:`CHECK_PROGRAM` (stdlib Python) evaluates the checks inside a sandbox: a path must
stay inside the workspace and be a regular file, not a symlink. :func:`export_bench_suite`
writes the intents as bench task directories (built-in layout) so that ``uv run bench
--suite DIR`` evaluates any model on them with sandboxed verification.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from clawrl.ise_synth.records import IntentRecord
from clawrl.ise_synth.render import _ASK, _OPENERS, _SELF, _articles, _first_name
from clawrl.ise_synth.taxonomy import Taxonomy, load_taxonomy

__all__ = [
    "CHECK_KINDS",
    "CHECK_PROGRAM",
    "STEP_KINDS",
    "CheckableIntentGenerator",
    "check_program",
    "export_bench_suite",
    "generate_checkable_intents",
    "is_checkable",
]

Split = Literal["train", "heldout"]
#: The check kinds :data:`CHECK_PROGRAM` understands.
CHECK_KINDS: tuple[str, ...] = ("equals", "lines", "json_key", "absent")
_STEPS_BY_COMPLEXITY = {"simple": 1, "medium": 2, "complex": 3}
_SPLIT_STREAM = {"train": 0, "heldout": 1}

_STEMS = (
    "report", "notes", "summary", "budget", "plan", "draft", "inventory", "agenda",
    "minutes", "status", "backlog", "roster", "ledger", "digest", "invoice", "release",
    "survey", "contacts", "schedule", "metrics",
)  # fmt: skip
_WORDS = (
    "apple", "river", "stone", "cloud", "tiger", "maple", "ocean", "piano", "lemon",
    "candle", "forest", "silver", "garden", "rocket", "pepper", "harbor", "meadow", "falcon",
    "copper", "violet", "orange", "winter", "marble", "cactus", "anchor", "basket", "cobalt",
    "dragon", "ember", "glacier",
)  # fmt: skip
_NAMES = ("Alice", "Bruno", "Chen", "Dana", "Emil", "Farah", "Goran", "Hana", "Ivan", "Jun")
_CITIES = ("Lisbon", "Oslo", "Kyoto", "Lima", "Cairo", "Perth", "Quito", "Riga", "Tunis", "Hanoi")
_KEYS = ("owner", "region", "mode", "channel", "team", "stage", "tier", "queue")
_LEVELS = ("INFO", "WARN", "ERROR")
_MESSAGES = (
    "disk usage at 71%", "backup finished", "connection refused by db", "retrying upload",
    "cache warmed", "timeout talking to api", "user login ok", "quota exceeded",
    "config reloaded", "worker crashed",
)  # fmt: skip


@dataclass(frozen=True)
class _Step:
    """One step of a checkable intent."""

    text: str
    domain: str
    task: str
    skill: str
    files: dict[str, str]
    checks: list[dict[str, str]]
    solution: list[str]


class _Draw:
    """The random choices of one intent: a NumPy generator and the paths already used."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def pick(self, options: Sequence[str]) -> str:
        return options[int(self.rng.integers(len(options)))]

    def path(self, pattern: str) -> str:
        """A path ``pattern.format(stem)`` not used yet in this intent."""
        for _ in range(200):
            p = pattern.format(self.pick(_STEMS))
            if p not in self.used and not any(
                u.startswith(p + "/") or p.startswith(u + "/") for u in self.used
            ):
                self.used.add(p)
                return p
        raise RuntimeError(f"no free path for {pattern!r}")  # pragma: no cover

    def words(self, k: int) -> list[str]:
        return [_WORDS[int(i)] for i in self.rng.choice(len(_WORDS), size=k, replace=False)]


def _check(kind: str, path: str, text: str = "") -> dict[str, str]:
    return {"kind": kind, "path": path, "text": text}


def _q(s: str) -> str:
    return shlex.quote(s)


def _write(path: str, text: str) -> str:
    parent = str(Path(path).parent)
    mk = f"mkdir -p {_q(parent)} && " if parent != "." else ""
    return f"{mk}printf '%s\\n' {_q(text)} > {_q(path)}"


def _write_word(d: _Draw) -> _Step:
    name, word = d.path("{}.txt"), d.pick(_WORDS)
    return _Step(
        f"create a file `{name}` that contains just the word `{word}`",
        "file_io",
        "create a file with given content",
        "file creation",
        {},
        [_check("equals", name, word)],
        [_write(name, word)],
    )


def _copy(d: _Draw) -> _Step:
    src, dst = d.path("inbox/{}.txt"), d.path("archive/{}.txt")
    content = " ".join(d.words(4))
    return _Step(
        f"copy `{src}` to `{dst}`",
        "file_io",
        "copy a file into an archive folder",
        "file management",
        {src: content + "\n"},
        [_check("equals", dst, content)],
        [f"mkdir -p archive && cp {_q(src)} {_q(dst)}"],
    )


def _count_lines(d: _Draw) -> _Step:
    src, out = d.path("data/{}.txt"), d.path("{}_count.txt")
    m = int(d.rng.integers(3, 10))
    lines = [" ".join(d.words(2)) for _ in range(m)]
    return _Step(
        f"count the lines of `{src}` and write the number to `{out}`",
        "code_runtime",
        "count the records in a data file",
        "scripting",
        {src: "\n".join(lines) + "\n"},
        [_check("equals", out, str(m))],
        [f"wc -l < {_q(src)} | tr -d ' ' > {_q(out)}"],
    )


def _sum_numbers(d: _Draw) -> _Step:
    src, out = d.path("data/{}_numbers.txt"), d.path("{}_total.txt")
    nums = [int(x) for x in d.rng.integers(1, 100, size=int(d.rng.integers(3, 7)))]
    return _Step(
        f"add up the numbers in `{src}` (one per line) and write the total to `{out}`",
        "intelligence_core",
        "total the figures in a file",
        "quantitative reasoning",
        {src: "\n".join(map(str, nums)) + "\n"},
        [_check("equals", out, str(sum(nums)))],
        [f"awk '{{s += $1}} END {{print s}}' {_q(src)} > {_q(out)}"],
    )


def _upper(d: _Draw) -> _Step:
    src, out = d.path("notes/{}.txt"), d.path("{}_upper.txt")
    phrase = " ".join(d.words(3))
    return _Step(
        f"write the text of `{src}` in upper case to `{out}`",
        "intelligence_core",
        "reformat a short text",
        "text transformation",
        {src: phrase + "\n"},
        [_check("equals", out, phrase.upper())],
        [f"tr '[:lower:]' '[:upper:]' < {_q(src)} > {_q(out)}"],
    )


def _grep_errors(d: _Draw) -> _Step:
    src, out = d.path("logs/{}.log"), d.path("{}_errors.txt")
    n = int(d.rng.integers(5, 9))
    levels = [d.pick(_LEVELS[:2]) for _ in range(n)]
    for i in d.rng.choice(n, size=int(d.rng.integers(1, 4)), replace=False):
        levels[int(i)] = "ERROR"
    lines = [
        f"2026-11-{10 + i:02d} 0{i % 10}:15 {lv} {d.pick(_MESSAGES)}" for i, lv in enumerate(levels)
    ]
    errors = [ln for ln in lines if " ERROR " in ln]
    return _Step(
        f"copy the lines of `{src}` that contain ERROR into `{out}`",
        "system_infrastructure",
        "pull the errors out of a log",
        "log analysis",
        {src: "\n".join(lines) + "\n"},
        [_check("lines", out, "\n".join(errors))],
        [f"grep ERROR {_q(src)} > {_q(out)}"],
    )


def _json_key(d: _Draw) -> _Step:
    out, key, value = d.path("config/{}.json"), d.pick(_KEYS), d.pick(_WORDS)
    return _Step(
        f'write a JSON file `{out}` that sets the key "{key}" to the string "{value}"',
        "automation_flow",
        "write a small configuration file",
        "configuration",
        {},
        [_check("json_key", out, json.dumps([key, value]))],
        [_write(out, json.dumps({key: value}))],
    )


def _mkdir_file(d: _Draw) -> _Step:
    folder, word = d.path("projects/{}"), d.pick(_WORDS)
    return _Step(
        f"make a folder `{folder}` with a file `README.md` in it that says `{word}`",
        "file_io",
        "scaffold a project folder",
        "project scaffolding",
        {},
        [_check("equals", f"{folder}/README.md", word)],
        [_write(f"{folder}/README.md", word)],
    )


def _delete(d: _Draw) -> _Step:
    tmp = d.path("tmp/{}.tmp")
    return _Step(
        f"delete the file `{tmp}`",
        "system_infrastructure",
        "clean up temporary files",
        "cleanup",
        {tmp: "scratch data\n"},
        [_check("absent", tmp)],
        [f"rm -f {_q(tmp)}"],
    )


def _append(d: _Draw) -> _Step:
    todo = d.path("todo/{}.txt")
    old = [f"- review the {w}" for w in d.words(2)]
    new = f"- order more {d.pick(_WORDS)}"
    return _Step(
        f"add the line `{new}` at the end of `{todo}`",
        "agent_memory",
        "keep a to-do list up to date",
        "note keeping",
        {todo: "\n".join(old) + "\n"},
        [_check("lines", todo, "\n".join([*old, new]))],
        [f"printf '%s\\n' {_q(new)} >> {_q(todo)}"],
    )


def _replace(d: _Draw) -> _Step:
    doc = d.path("docs/{}.md")
    a, b = d.words(2)
    text = f"The {a} review is on Monday with the {a} team."
    return _Step(
        f"in `{doc}`, replace every `{a}` with `{b}`",
        "intelligence_core",
        "edit a document",
        "editing",
        {doc: text + "\n"},
        [_check("equals", doc, text.replace(a, b))],
        [f"sed -i 's/{a}/{b}/g' {_q(doc)}"],
    )


def _csv_lookup(d: _Draw) -> _Step:
    src = d.path("data/{}.csv")
    k = int(d.rng.integers(3, 6))
    names = [_NAMES[int(i)] for i in d.rng.choice(len(_NAMES), size=k, replace=False)]
    cities = [_CITIES[int(i)] for i in d.rng.choice(len(_CITIES), size=k, replace=False)]
    who = int(d.rng.integers(k))
    out = d.path(f"{names[who].lower()}_city_{{}}.txt")
    rows = "\n".join(f"{n},{c}" for n, c in zip(names, cities, strict=True))
    return _Step(
        f"look up the city of {names[who]} in `{src}` and write it to `{out}`",
        "web_extraction",
        "extract a field from a table",
        "data extraction",
        {src: "name,city\n" + rows + "\n"},
        [_check("equals", out, cities[who])],
        [f"grep '^{names[who]},' {_q(src)} | cut -d, -f2 > {_q(out)}"],
    )


#: The step kinds (name → builder), each one sandbox-executable offline.
STEP_KINDS: dict[str, Callable[[_Draw], _Step]] = {
    "write_word": _write_word,
    "copy": _copy,
    "count_lines": _count_lines,
    "sum_numbers": _sum_numbers,
    "upper": _upper,
    "grep_errors": _grep_errors,
    "json_key": _json_key,
    "mkdir_file": _mkdir_file,
    "delete": _delete,
    "append": _append,
    "replace": _replace,
    "csv_lookup": _csv_lookup,
}


class CheckableIntentGenerator:
    """Draws checkable intents (see the module docstring), reproducibly.

    Args:
        taxonomy: personas and complexity levels (default: the shipped taxonomy); its
            domains name the step kinds' domains.
        seed: base seed; draw ``i`` of ``split`` uses ``numpy.random.default_rng([seed,
            split stream, i])``.
        complexity_mix: ``{level: weight}`` over ``simple`` / ``medium`` / ``complex``
            (default: the taxonomy's weights).

    Raises:
        ValueError: an unknown complexity level or weights that are not positive.
    """

    def __init__(
        self,
        taxonomy: Taxonomy | None = None,
        seed: int = 0,
        complexity_mix: dict[str, float] | None = None,
    ) -> None:
        self.taxonomy = taxonomy or load_taxonomy()
        self.seed = int(seed)
        levels = [c.name for c in self.taxonomy.complexities]
        mix = complexity_mix or {c.name: c.weight for c in self.taxonomy.complexities}
        unknown = set(mix) - (set(_STEPS_BY_COMPLEXITY) & set(levels))
        if unknown:
            raise ValueError(f"unknown complexity levels {sorted(unknown)}")
        self._levels = sorted(mix)
        w = np.array([mix[k] for k in self._levels], dtype=np.float64)
        if (w < 0).any() or w.sum() <= 0:
            raise ValueError(f"complexity weights must be >= 0 with a positive sum: {mix}")
        self._p = w / w.sum()
        self._domains = {d.id: d for d in self.taxonomy.domains}

    def draw(self, index: int, split: Split = "train") -> IntentRecord:
        """The intent of draw ``index`` of ``split`` (deterministic).

        Raises:
            ValueError: ``index`` < 0 or an unknown split.
        """
        if index < 0:
            raise ValueError(f"index must be >= 0, got {index}")
        if split not in _SPLIT_STREAM:
            raise ValueError(f"unknown split {split!r} (train | heldout)")
        rng = np.random.default_rng([self.seed, _SPLIT_STREAM[split], index])
        d = _Draw(rng)
        level = self._levels[int(rng.choice(len(self._levels), p=self._p))]
        persona = self.taxonomy.personas[int(rng.integers(len(self.taxonomy.personas)))]
        kinds = list(STEP_KINDS)
        chosen = rng.choice(len(kinds), size=_STEPS_BY_COMPLEXITY[level], replace=False)
        steps = [STEP_KINDS[kinds[int(i)]](d) for i in chosen]
        text = _render(d, persona.to_dict(), [s.text for s in steps], level)
        domains: dict[str, dict[str, Any]] = {}
        for s in steps:
            dom = self._domains.get(s.domain)
            entry = domains.setdefault(
                s.domain,
                {"domain": s.domain, "name": dom.name if dom else s.domain, "tasks": []},
            )
            entry["tasks"].append(s.task)
        tools = ["bash", "read_file", "write_file", "edit_file"]
        digest = _digest(self.seed, split, index, text)
        files = {p: c for s in steps for p, c in s.files.items()}
        return IntentRecord(
            id=f"checkable-{split}-{index:06d}-{digest}",
            intent=text,
            persona=persona.to_dict(),
            domains=list(domains.values()),
            tools=tools,
            skills=list(dict.fromkeys(s.skill for s in steps)),
            complexity=level,
            renderer="checkable",
            seed=self.seed,
            index=index,
            extra={
                "split": split,
                "steps": [s.text for s in steps],
                "step_kinds": [kinds[int(i)] for i in chosen],
                "workspace": [{"path": p, "content": c} for p, c in sorted(files.items())],
                "checks": [c for s in steps for c in s.checks],
                "solution": "\n".join(["set -e", *(line for s in steps for line in s.solution)])
                + "\n",
                "demonstration": _demonstration(steps),
            },
        )


def _demonstration(steps: Sequence[_Step]) -> list[str]:
    """Shell commands that solve the steps in order, run in the workspace: per step, look
    at its input files (``ls`` when it has none), then its oracle lines; last, look at
    every file a check reads (``ls`` when every check is ``absent``)."""
    commands: list[str] = []
    for s in steps:
        commands.append("cat " + " ".join(map(_q, sorted(s.files))) if s.files else "ls")
        commands.append("\n".join(s.solution))
    outputs = [c["path"] for s in steps for c in s.checks if c["kind"] != "absent"]
    commands.append("cat " + " ".join(map(_q, dict.fromkeys(outputs))) if outputs else "ls")
    return commands


def _digest(seed: int, split: str, index: int, text: str) -> str:
    import hashlib

    return hashlib.sha1(f"{seed}\0{split}\0{index}\0{text}".encode()).hexdigest()[:10]


def _render(d: _Draw, persona: dict[str, str], steps: list[str], level: str) -> str:
    """The request in the persona's register: opener, self-introduction, the steps."""
    style = persona.get("communication_style", "formal")
    style = style if style in _ASK else "formal"
    fields = {
        "role": persona.get("role", ""),
        "industry": persona.get("industry", ""),
        "work_context": persona.get("work_context", ""),
        "experience_level": persona.get("experience_level", ""),
        "expertise": persona.get("expertise", ""),
        "first": _first_name(persona.get("name", "")),
    }
    intro = d.pick(_OPENERS[style]) + d.pick(_SELF[style]).format(**fields)
    if len(steps) == 1:
        ask = f"In the workspace, please {steps[0]}."
    else:
        listed = " ".join(f"({i}) {s};" for i, s in enumerate(steps, 1)).rstrip(";")
        ask = f"In the workspace, please do these {len(steps)} things: {listed}."
    close = {
        "simple": "",
        "medium": " Tell me briefly what you did.",
        "complex": " Check each step.",
    }
    return _articles(re.sub(r"\s+", " ", intro + ask + close[level]).strip())


def generate_checkable_intents(
    n: int, seed: int = 0, split: Split = "train", *, start: int = 0, **kwargs: Any
) -> list[IntentRecord]:
    """``n`` checkable intents of ``split`` (draws ``start`` … ``start + n - 1``);
    ``kwargs`` go to :class:`CheckableIntentGenerator`.

    Raises:
        ValueError: ``n`` < 0, or as :meth:`CheckableIntentGenerator.draw`.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    gen = CheckableIntentGenerator(seed=seed, **kwargs)
    return [gen.draw(i, split) for i in range(start, start + n)]


def is_checkable(intent: IntentRecord) -> bool:
    """Whether ``intent`` carries checks (a list of ``{"kind", "path", "text"}``)."""
    checks = intent.extra.get("checks")
    return isinstance(checks, list) and bool(checks)


#: Evaluates ``CHECKS`` (a JSON list, substituted for ``__CHECKS__`` by :func:`check_program`)
#: on the workspace ``$CLAWRL_WORKSPACE`` (default ``/workspace``). Prints one JSON object
#: ``{"reward": 0.0 | 1.0, "passed": k, "checks": n, "check_1": 0.0 | 1.0, ..., "failed":
#: [reasons]}`` and, when ``$CLAWRL_REWARD_DIR`` is set, writes it as ``reward.json`` there
#: (bench's built-in verifier convention). Stdlib only.
CHECK_PROGRAM = r'''"""Checks of a checkable ISE intent (clawrl.ise_synth.checkable)."""
import json
import os

CHECKS = json.loads(__CHECKS__)
ws = os.path.realpath(os.environ.get("CLAWRL_WORKSPACE", "/workspace"))


def read(rel):
    path = os.path.join(ws, rel)
    real = os.path.realpath(path)
    if os.path.isabs(rel) or not real.startswith(ws + os.sep):
        return None, "outside the workspace"
    if os.path.islink(path):
        return None, "a symlink"
    if not os.path.isfile(path):
        return None, "missing"
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read(1 << 20), ""


def lines(text):
    return [ln.strip() for ln in text.splitlines() if ln.strip()]


def check(c):
    kind, rel, text = c["kind"], c["path"], c["text"]
    if kind == "absent":
        return not os.path.lexists(os.path.join(ws, rel)), "still there"
    content, why = read(rel)
    if content is None:
        return False, why
    if kind == "equals":
        return content.strip() == text.strip(), "content differs"
    if kind == "lines":
        return lines(content) == lines(text), "lines differ"
    if kind == "json_key":
        key, value = json.loads(text)
        try:
            data = json.loads(content)
        except ValueError:
            return False, "not JSON"
        return isinstance(data, dict) and data.get(key) == value, "key differs"
    return False, "unknown check kind %r" % kind


out = {"passed": 0, "checks": len(CHECKS), "failed": []}
for i, c in enumerate(CHECKS, 1):
    ok, why = check(c)
    out["check_%d" % i] = float(ok)
    out["passed"] += int(ok)
    if not ok:
        out["failed"].append("%s %s: %s" % (c["kind"], c["path"], why))
out["reward"] = float(out["passed"] == out["checks"] and out["checks"] > 0)
reward_dir = os.environ.get("CLAWRL_REWARD_DIR")
if reward_dir:
    scores = {k: v for k, v in out.items() if k == "reward" or k.startswith("check_")}
    with open(os.path.join(reward_dir, "reward.json"), "w") as fh:
        json.dump(scores, fh)
print(json.dumps(out))
'''


def check_program(checks: Sequence[dict[str, str]]) -> str:
    """:data:`CHECK_PROGRAM` with ``checks`` embedded (a Python string literal of their JSON).

    Raises:
        ValueError: a check that is not ``{"kind", "path", "text"}`` of a known kind, or a
            path that is absolute or leaves the workspace.
    """
    for c in checks:
        if set(c) != {"kind", "path", "text"} or c["kind"] not in CHECK_KINDS:
            raise ValueError(f"malformed check {c!r}")
        if c["path"].startswith("/") or ".." in Path(c["path"]).parts:
            raise ValueError(f"check path {c['path']!r} leaves the workspace")
    return CHECK_PROGRAM.replace("__CHECKS__", repr(json.dumps(list(checks))))


_CATEGORY = {
    "file_io": "productivity",
    "code_runtime": "software",
    "intelligence_core": "analysis",
    "system_infrastructure": "systems",
    "automation_flow": "systems",
    "agent_memory": "planning",
    "web_extraction": "analysis",
}
_DIFFICULTY = {"simple": "easy", "medium": "medium", "complex": "hard"}


def _user_side(intent: IntentRecord) -> dict[str, Any]:
    """What a simulated user of ``intent`` knows: the record without its checks, solution,
    demonstration and workspace files."""
    d = intent.to_dict()
    for key in ("checks", "solution", "workspace", "demonstration"):
        d.pop(key, None)
    return d


def _demo(intent: IntentRecord) -> list[str]:
    demo = intent.extra.get("demonstration")
    ok = isinstance(demo, list) and all(isinstance(c, str) for c in demo)
    return list(demo) if ok and demo else []


def export_bench_suite(
    intents: Iterable[IntentRecord], dest: Path | str, *, agent_timeout_s: int = 300
) -> list[Path]:
    """Write each checkable intent as a bench task directory (built-in layout) under
    ``dest``: ``task.toml`` (id, the intent text as the instruction, category from the primary
    domain, difficulty from the complexity, timeouts, ``[metadata] family =
    "ise-checkable"``, the user's side for a simulated user and the ``demonstration``),
    ``environment/`` (the workspace files), ``tests/check.py``
    (:func:`check_program`; the reward is 1 iff every check passes, each check a sub-score)
    and ``solution/solve.sh`` (the oracle). Returns the directories in order.

    Raises:
        ValueError: an intent without checks, or a workspace path outside the workspace.
    """
    root = Path(dest)
    out: list[Path] = []
    for intent in intents:
        if not is_checkable(intent):
            raise ValueError(f"intent {intent.id} has no checks")
        task_dir = root / intent.id
        env = task_dir / "environment"
        for sub in ("environment", "tests", "solution"):
            (task_dir / sub).mkdir(parents=True, exist_ok=True)
        for f in intent.extra.get("workspace", []):
            rel = Path(f["path"])
            if rel.is_absolute() or ".." in rel.parts:
                raise ValueError(f"intent {intent.id}: workspace path {f['path']!r}")
            (env / rel).parent.mkdir(parents=True, exist_ok=True)
            (env / rel).write_text(f["content"])
        demo = _demo(intent)
        (task_dir / "task.toml").write_text(
            f"id = {json.dumps(intent.id)}\n"
            f"instruction = {json.dumps(intent.intent)}\n"
            f'category = "{_CATEGORY.get(intent.primary_domain, "productivity")}"\n'
            f'difficulty = "{_DIFFICULTY.get(intent.complexity, "medium")}"\n'
            "verifier_executes_workspace_code = false\n\n"
            f"[timeouts]\nagent_s = {int(agent_timeout_s)}\nverifier_s = 30\n\n"
            '[metadata]\nfamily = "ise-checkable"\n'
            f"split = {json.dumps(intent.extra.get('split', ''))}\n"
            f"complexity = {json.dumps(intent.complexity)}\n"
            # the user's side for a simulated user (persona, intent, steps; no checks or
            # solution): read on the host, never placed in the sandbox
            f"user = {json.dumps(json.dumps(_user_side(intent)))}\n"
            # the worked solution for a cold start (records drawn before it existed lack it)
            + (f"demonstration = {json.dumps(demo)}\n" if demo else "")
        )
        (task_dir / "tests" / "check.py").write_text(check_program(intent.extra["checks"]))
        (task_dir / "solution" / "solve.sh").write_text(
            "#!/bin/bash\n" + str(intent.extra.get("solution", ""))
        )
        out.append(task_dir)
    return out
