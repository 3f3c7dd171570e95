"""A learnable task family for tiny models trained on CPU (the RL quickstart).

Each instance asks: *create the file NAME containing WORD*. One tool call solves it (a
``write_file`` or ``printf WORD > NAME``). The verifier gives graded partial credit through
three sub-scores, so a policy that only learns part of the skill still gets a gradient
(a tiny byte-level model's near misses, ``memo.txt`` for ``note.txt``, score between 0 and 1):

* ``file_created`` — 1 if the workspace (empty at the start) holds a regular file: the
  model's tool call was well-formed and the harness executed it;
* ``name_similarity`` — the best ``difflib.SequenceMatcher`` ratio between a file's path
  (relative to the workspace) and ``NAME`` (1 iff the file exists);
* ``content_similarity`` — the same ratio between that file's content, stripped of
  surrounding whitespace, and ``WORD`` (of the best-named file; ties: the better content).

reward = mean of the three; it is 1 iff ``NAME`` holds ``WORD`` (a pass). The untouched
workspace scores 0.

Vocabulary: 80 file names (20 stems x 4 extensions) and 90 words. ``n_names`` /
``n_words`` restrict a draw to the first names (``.txt`` ones first) and words, a smaller
family that a tiny model learns within CPU minutes (the RL quickstart uses 8 x 12).

Splits: every (name, word) pair is assigned to ``train`` or ``heldout`` by a hash of the
pair (about 80/20), so the two splits are disjoint for any seeds; within a split,
``seed`` picks which pairs are drawn (deterministically). Instances are written in the
built-in layout and loaded back as ordinary :class:`~clawrl.bench.Task` s.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Literal

from clawrl.bench.task import Task
from clawrl.bench.tasks.loading import load_task

__all__ = [
    "LEARNABLE_WORDS",
    "LearnableInstance",
    "generate_learnable_tasks",
    "learnable_instances",
]

Split = Literal["train", "heldout"]

#: Content words (lowercase ASCII, 3–6 letters).
LEARNABLE_WORDS: tuple[str, ...] = (
    "apple",
    "river",
    "stone",
    "cloud",
    "tiger",
    "maple",
    "ocean",
    "piano",
    "lemon",
    "candle",
    "forest",
    "silver",
    "garden",
    "rocket",
    "pepper",
    "window",
    "summer",
    "winter",
    "orange",
    "violet",
    "planet",
    "bridge",
    "castle",
    "coffee",
    "dragon",
    "falcon",
    "harbor",
    "island",
    "jungle",
    "kettle",
    "ladder",
    "marble",
    "needle",
    "pillow",
    "rabbit",
    "saddle",
    "tunnel",
    "velvet",
    "walnut",
    "yellow",
    "zebra",
    "anchor",
    "banjo",
    "cactus",
    "daisy",
    "eagle",
    "fig",
    "grape",
    "honey",
    "ink",
    "jade",
    "kiwi",
    "lily",
    "mango",
    "nut",
    "olive",
    "pearl",
    "quartz",
    "ruby",
    "salt",
    "tea",
    "urn",
    "vase",
    "wolf",
    "yak",
    "zinc",
    "bell",
    "corn",
    "dove",
    "fern",
    "gold",
    "hawk",
    "iron",
    "jazz",
    "kite",
    "lamp",
    "moon",
    "nest",
    "oak",
    "pine",
    "rain",
    "sand",
    "tree",
    "wave",
    "bird",
    "fish",
    "star",
    "snow",
    "leaf",
    "rose",
)
_STEMS: tuple[str, ...] = (
    "note",
    "hello",
    "data",
    "todo",
    "out",
    "memo",
    "list",
    "log",
    "word",
    "info",
    "draft",
    "result",
    "answer",
    "name",
    "msg",
    "file",
    "item",
    "entry",
    "key",
    "tag",
)
_EXTS: tuple[str, ...] = (".txt", ".md", ".log", ".dat")
_TEMPLATES: tuple[str, ...] = (
    "Create the file {name} containing the word {word}.",
    "Write the word {word} into a new file named {name}.",
    "Make a file called {name} whose content is {word}.",
)
_HELDOUT_PERCENT = 20


class LearnableInstance:
    """One instance: ``name`` (file name), ``word`` (its content) and ``instruction``."""

    __slots__ = ("instruction", "name", "word")

    def __init__(self, name: str, word: str, instruction: str) -> None:
        self.name = name
        self.word = word
        self.instruction = instruction

    @property
    def task_id(self) -> str:
        """Stable id: ``learn_<name without dot>_<word>``."""
        return f"learn_{self.name.replace('.', '_')}_{self.word}"

    def __repr__(self) -> str:
        return f"LearnableInstance(name={self.name!r}, word={self.word!r})"


def _split_of(name: str, word: str) -> Split:
    digest = hashlib.sha256(f"{name}\0{word}".encode()).digest()
    return "heldout" if digest[0] * 100 // 256 < _HELDOUT_PERCENT else "train"


def _vocabulary(n_names: int | None, n_words: int | None) -> tuple[list[str], list[str]]:
    n_all = len(_STEMS) * len(_EXTS)
    if n_names is not None and not 1 <= n_names <= n_all:
        raise ValueError(f"n_names must be in [1, {n_all}], got {n_names}")
    if n_words is not None and not 1 <= n_words <= len(LEARNABLE_WORDS):
        raise ValueError(f"n_words must be in [1, {len(LEARNABLE_WORDS)}], got {n_words}")
    if n_names is None:  # the full family keeps its original pair order (same draws)
        names = [f"{stem}{ext}" for stem in _STEMS for ext in _EXTS]
    else:
        names = [f"{stem}{ext}" for ext in _EXTS for stem in _STEMS][:n_names]
    return names, list(LEARNABLE_WORDS[:n_words])


def learnable_instances(
    split: Split,
    n: int,
    seed: int = 0,
    *,
    n_names: int | None = None,
    n_words: int | None = None,
) -> list[LearnableInstance]:
    """Draw ``n`` distinct instances of ``split`` deterministically from ``seed``.

    ``n_names`` / ``n_words`` (default: all 80 / 90) restrict the family to the first file
    names and words; a pair's split does not depend on them.

    Raises:
        ValueError: ``split`` is unknown, ``n`` < 0, ``n`` exceeds the split's size, or
            ``n_names`` / ``n_words`` are out of range.
    """
    if split not in ("train", "heldout"):
        raise ValueError(f"unknown split {split!r} (train | heldout)")
    names, words = _vocabulary(n_names, n_words)
    pairs = [(name, word) for name in names for word in words if _split_of(name, word) == split]
    if not 0 <= n <= len(pairs):
        raise ValueError(f"n must be in [0, {len(pairs)}] for split {split!r}, got {n}")
    rng = random.Random(f"{split}:{seed}")
    chosen = rng.sample(pairs, n)
    return [
        LearnableInstance(name, word, rng.choice(_TEMPLATES).format(name=name, word=word))
        for name, word in chosen
    ]


_CHECK = '''\
"""Verifier of a learnable task: file_created, name_similarity, content_similarity (and
the exact pass as the reward when EXACT)."""
import difflib
import json
import os
from pathlib import Path

NAME = {name!r}
WORD = {word!r}
EXACT = {exact!r}


def similarity(a, b):
    return difflib.SequenceMatcher(None, a, b).ratio()


ws = Path(os.environ.get("CLAWRL_WORKSPACE", "/workspace"))
out = Path(os.environ.get("CLAWRL_REWARD_DIR", "/logs/verifier"))
files = sorted(p for p in ws.rglob("*") if p.is_file() and not p.is_symlink())
best = (0.0, 0.0)
for p in files[:100]:
    name = similarity(p.relative_to(ws).as_posix(), NAME)
    with p.open(encoding="utf-8", errors="replace") as f:
        text = f.read(10000).strip()
    best = max(best, (name, similarity(text, WORD)))
scores = {{
    "file_created": float(bool(files)),
    "name_similarity": round(best[0], 6),
    "content_similarity": round(best[1], 6),
}}
if EXACT:
    target = ws / NAME
    passed = target.is_file() and not target.is_symlink()
    if passed:
        with target.open(encoding="utf-8", errors="replace") as f:
            passed = f.read(10000).strip() == WORD
    scores = {{"reward": float(passed), **scores}}
(out / "reward.json").write_text(json.dumps(scores))
'''


def generate_learnable_tasks(
    dest: Path | str,
    split: Split = "train",
    n: int = 64,
    seed: int = 0,
    *,
    n_names: int | None = None,
    n_words: int | None = None,
    reward: Literal["graded", "exact"] = "graded",
) -> list[Task]:
    """Write ``n`` instances of ``split`` as built-in task directories under ``dest``.

    Each directory holds ``task.toml`` (category ``systems``, difficulty ``easy``, 60 s
    agent / 30 s verifier timeouts), an empty ``environment/``, ``tests/check.py`` and
    ``solution/solve.sh``. Returns the loaded tasks in draw order.

    ``reward``: ``graded`` — the mean of the three sub-scores (module docstring); ``exact``
    — 1.0 iff the file ``NAME`` (that path, a regular file) holds ``WORD`` once surrounding
    whitespace is stripped, else 0.0, with the three sub-scores beside it (logged, not
    rewarded).

    Raises:
        ValueError: see :func:`learnable_instances`; ``reward`` is neither mode.
    """
    if reward not in ("graded", "exact"):
        raise ValueError(f"unknown reward {reward!r} (graded | exact)")
    root = Path(dest)
    tasks: list[Task] = []
    for inst in learnable_instances(split, n, seed, n_names=n_names, n_words=n_words):
        task_dir = root / inst.task_id
        (task_dir / "environment").mkdir(parents=True, exist_ok=True)
        (task_dir / "tests").mkdir(exist_ok=True)
        (task_dir / "solution").mkdir(exist_ok=True)
        (task_dir / "task.toml").write_text(
            f"id = {json.dumps(inst.task_id)}\n"
            f"instruction = {json.dumps(inst.instruction)}\n"
            'category = "systems"\ndifficulty = "easy"\n'
            "verifier_executes_workspace_code = false\n\n"
            "[timeouts]\nagent_s = 60\nverifier_s = 30\n\n"
            f'[metadata]\nfamily = "learnable"\nsplit = "{split}"\n'
            f"file = {json.dumps(inst.name)}\nword = {json.dumps(inst.word)}\n"
        )
        (task_dir / "tests" / "check.py").write_text(
            _CHECK.format(name=inst.name, word=inst.word, exact=reward == "exact")
        )
        (task_dir / "solution" / "solve.sh").write_text(
            f"#!/bin/bash\nprintf '%s\\n' {inst.word} > {inst.name}\n"
        )
        tasks.append(load_task(task_dir))
    return tasks
