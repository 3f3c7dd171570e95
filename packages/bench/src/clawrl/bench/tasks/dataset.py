"""Tasks from a dataset file: one built-in task per row, read with Hugging Face ``datasets``.

A JSON file (an array of objects, or JSON Lines: ``.json`` / ``.jsonl``) or a Parquet file
(``.parquet``), read with ``datasets.load_dataset`` (the extra ``clawrl-bench[datasets]``),
whose rows are built-in tasks:

- ``id``, ``instruction``, ``category``, ``difficulty`` and the other keys of a built-in
  ``task.toml`` (``network``, ``timeouts``, ``limits``, ``metadata``,
  ``verifier_executes_workspace_code``), with the same meaning and checks;
- ``environment``, ``tests`` and ``solution``: the text files of those folders, as an
  object ``{"relative/path": "text"}`` or a list of ``{"path": …, "content": …}``;
  ``tests`` holds ``test.sh`` or ``check.py``, ``solution`` ``solve.sh`` (the oracle).

A missing value (``null``: Parquet gives a row the keys that other rows have) counts as
absent. Each row's files are staged into a content-addressed cache folder, the task's root,
and the row is then exactly the built-in task of those files (layout ``builtin``). A row
that is not a valid task fails the whole file, naming the row.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from clawrl.bench.errors import TaskLoadError
from clawrl.bench.staging import stage_files
from clawrl.bench.task import Task
from clawrl.bench.tasks.base import TaskLayout
from clawrl.bench.tasks.builtin import builtin_task
from clawrl.bench.tasks.files import validation_reason
from pydantic import ValidationError

__all__ = ["DatasetLayout", "load_dataset_tasks"]

_FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}
_FILE_KEYS = ("environment", "tests", "solution")
_STAGE_VERSION = "dataset-1"


def _first_row(path: Path) -> Any:
    """The first row of a JSON / JSON Lines file (``None`` if it has none or is not JSON)."""
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".jsonl":
            line = next((ln for ln in text.splitlines() if ln.strip()), "null")
            return json.loads(line)
        data = json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return data[0] if isinstance(data, list) and data else None


def is_dataset_file(path: Path) -> bool:
    """Whether ``path`` is a ``.parquet`` file, or a JSON / JSON Lines file whose first row
    has an ``instruction`` and ``tests``."""
    if not path.is_file() or path.suffix not in _FORMATS:
        return False
    if path.suffix == ".parquet":
        return True
    row = _first_row(path)
    return isinstance(row, dict) and "instruction" in row and "tests" in row


def _rows(path: Path) -> list[dict[str, Any]]:
    try:
        import datasets
    except ImportError:
        raise TaskLoadError(
            path, "a dataset file needs the datasets library: pip install 'clawrl-bench[datasets]'"
        ) from None
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    # read into memory, its cache in a folder of ours that goes afterwards
    with tempfile.TemporaryDirectory(prefix="clawrl-dataset-") as cache:
        try:
            table = datasets.load_dataset(
                _FORMATS[path.suffix],
                data_files=str(path),
                split="train",
                cache_dir=cache,
                keep_in_memory=True,
            )
        except Exception as exc:  # the library's errors share no base class
            reason = " ".join(str(exc).split())[:300]
            raise TaskLoadError(path, f"cannot read it as a dataset: {reason}") from exc
        return [dict(row) for row in table]


def _files(path: Path, where: str, key: str, value: Any) -> dict[str, bytes]:
    """The files of one folder of a row (``{path: text}`` or ``[{path, content}]``), keyed
    ``<key>/<relative path>``."""
    if value is None:
        return {}
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list) and all(isinstance(e, dict) for e in value):
        items = [(e.get("path"), e.get("content")) for e in value]
    else:
        raise TaskLoadError(
            path,
            f"{where}: `{key}` must be an object {{path: text}} or a list of {{path, content}}",
        )
    out: dict[str, bytes] = {}
    for rel, text in items:
        if text is None:
            continue
        name = PurePosixPath(str(rel or ""))
        if not str(rel or "") or name.is_absolute() or ".." in name.parts:
            raise TaskLoadError(path, f"{where}: `{key}` path {rel!r} must be a relative path")
        if not isinstance(text, str):
            raise TaskLoadError(path, f"{where}: `{key}` file {rel!r} must be text")
        out[f"{key}/{name.as_posix()}"] = text.encode("utf-8")
    return out


def _fields(row: dict[str, Any]) -> dict[str, Any]:
    """The ``task.toml`` fields of a row, missing (``None``) values left out, also one level
    down (the tables ``timeouts``, ``limits``, ``metadata``)."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if key in _FILE_KEYS or value is None:
            continue
        out[key] = (
            {k: v for k, v in value.items() if v is not None} if isinstance(value, dict) else value
        )
    return out


def load_dataset_tasks(path: Path | str) -> list[Task]:
    """One built-in task per row of the dataset file ``path`` (see the module docstring).

    Raises:
        TaskLoadError: the file cannot be read as a dataset, the extra is missing, or a row
            is not a valid task (the reason names the row).
    """
    source = Path(path).resolve()
    tasks: list[Task] = []
    for i, row in enumerate(_rows(source)):
        where = f"row {i}" + (f" ({row['id']!r})" if isinstance(row.get("id"), str) else "")
        files: dict[str, bytes] = {}
        for key in _FILE_KEYS:
            files |= _files(source, where, key, row.get(key))
        try:
            root = stage_files("dataset", _STAGE_VERSION, files)
            tasks.append(builtin_task(root, _fields(row)))
        except TaskLoadError as exc:
            raise TaskLoadError(source, f"{where}: {exc.reason}") from exc
        except ValidationError as exc:
            raise TaskLoadError(source, f"{where}: {validation_reason(exc)}") from exc
        except OSError as exc:
            raise TaskLoadError(source, f"{where}: cannot stage its files: {exc}") from exc
    if not tasks:
        raise TaskLoadError(source, "the dataset has no rows")
    return tasks


class DatasetLayout(TaskLayout):
    """A dataset file of built-in tasks, one per row (a suite; its tasks are ``builtin``)."""

    name = "dataset"

    def detect(self, path: Path) -> bool:
        return False  # its tasks are rows of a file, not directories

    def load(self, path: Path) -> Task:
        raise TaskLoadError(path, "a dataset's task is a row of its file")

    def detect_suite(self, path: Path) -> bool:
        return is_dataset_file(path)

    def load_suite(self, path: Path) -> list[Task]:
        return load_dataset_tasks(path)
