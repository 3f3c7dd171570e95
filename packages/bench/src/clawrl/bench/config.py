"""The configuration of a ``bench`` run: one TOML file, every value with a default,
command-line options override it; the resolved configuration is saved with the results.

Example ``bench.toml`` (all keys optional; these are the defaults)::

    suites = ["builtin"]          # "builtin" or suite directories (each task a sub-directory)
    tasks = []                    # single task directories (any layout) or suite files (a
                                  # dataset's .jsonl/.json/.parquet); given without
                                  # suites, only these tasks run
    task_ids = []                 # keep only these ids ([] = the slice below)
    layout = ""                   # "" = detect each task's layout; else the layout of the
                                  # suite and task directories: a name (builtin, harbor,
                                  # terminal-bench-1, clawgym, agentbench-os, an installed
                                  # plug-in's) or an import path "module:Class"
    slice = "auto"                # "auto": the built-in suite's "default" slice, every task
                                  # of an external suite; "default": one easy task per
                                  # category; "all"; N (an integer: N tasks per suite) or a
                                  # fraction in (0, 1): a sample, seeded by slice_seed
    slice_seed = 0
    harnesses = ["reference", "oracle"]
    model = "embedded"            # embedded | scripted | sglang
    tokenizer = "byte"            # the default tiny model's tokenizer: byte | qwen3
    model_dir = ""                # an HF model directory ("" = the default tiny model)
    sglang_url = ""               # model = "sglang": a running server, or
    launch_sglang = false         # start one for model_dir
    samples = 1
    concurrency = 2
    max_turns = 8
    max_tokens = 96               # per-call output cap the harness asks for (0 = none;
                                  # not applied to model = "scripted")
    agent_timeout_s = 0           # 0 = each task's own timeout
    timeout_reference_tps = 20.0  # agent timeouts grow on a backend decoding slower than
                                  # this many tokens/s (measured; at most x10); 0 = never
    retries = 1                   # infrastructure failures only
    ks = [1]                      # pass@k
    pass_threshold = 1.0
    output_dir = ""               # "" = runs/bench-<timestamp>
    html = true
    task_images = true            # build each task's Dockerfile (Harbor) into its image;
                                  # false: every task runs in the default root
    agent_network = false         # true: the agent phase of tasks that declare a network
                                  # gets podman's bridge (trusted tasks only)
    network = true                # false: no task gets a network, in any phase; a task
                                  # that declares one and scores below 1 is then a
                                  # verifier-error naming the network
    sandbox_hosts = []            # [] = agent sandboxes on the local podman only

    # Instead of `sandbox_hosts = []`: agent sandboxes on several podman hosts, spread by
    # free capacity (verifiers stay on this machine), one table per host; a remote host
    # needs the model relay of clawrl-sandbox's README, "Sandboxes on several hosts":
    [[sandbox_hosts]]
    name = "local"
    capacity = 8                  # sandboxes alive at once on it
    [[sandbox_hosts]]
    name = "box2"
    capacity = 32
    url = "ssh://root@box2/run/podman/podman.sock"   # podman --url; or connection = "NAME"
    model_socket = "/run/clawrl-relay/model.sock"    # the relay's socket on box2
"""

from __future__ import annotations

import math
import random
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from clawrl.bench.errors import BenchError
from clawrl.bench.rollout_types import DEFAULT_MAX_TURNS
from clawrl.bench.task import CATEGORIES, DIFFICULTIES, Task
from clawrl.bench.tasks.loading import load_builtin_suite, load_suite, load_task
from clawrl.bench.tasks.registry import get_layout
from clawrl.sandbox import SandboxHost, SandboxSpecError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

__all__ = ["BenchConfig", "ConfigError", "SandboxHostConfig", "load_config", "select_tasks"]


class ConfigError(BenchError):
    """The configuration file or an override is invalid (the message names the key)."""


class SandboxHostConfig(BaseModel):
    """One ``[[sandbox_hosts]]`` table: a podman endpoint for agent sandboxes
    (:class:`clawrl.sandbox.SandboxHost`; ``""`` = not set)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    capacity: int = Field(ge=0)
    url: str = ""
    connection: str = ""
    model_socket: str = ""

    @model_validator(mode="after")
    def _check(self) -> SandboxHostConfig:
        try:
            self.host()
        except SandboxSpecError as exc:
            raise ValueError(str(exc)) from None
        return self

    def host(self) -> SandboxHost:
        """The :class:`~clawrl.sandbox.SandboxHost` it describes.

        Raises:
            SandboxSpecError: an invalid name, url or connection.
        """
        return SandboxHost(
            self.name,
            self.capacity,
            url=self.url or None,
            connection=self.connection or None,
            model_socket=Path(self.model_socket) if self.model_socket else None,
        )


class BenchConfig(BaseModel):
    """A ``bench`` run's configuration (see the module docstring for the keys)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    suites: list[str] = Field(default_factory=lambda: ["builtin"])
    tasks: list[str] = Field(default_factory=list)
    task_ids: list[str] = Field(default_factory=list)
    layout: str = ""
    slice: str = "auto"
    slice_seed: int = 0
    harnesses: list[str] = Field(default_factory=lambda: ["reference", "oracle"])
    model: Literal["embedded", "scripted", "sglang"] = "embedded"
    tokenizer: Literal["byte", "qwen3"] = "byte"
    model_dir: str = ""
    sglang_url: str = ""
    launch_sglang: bool = False
    samples: int = Field(default=1, ge=1)
    concurrency: int = Field(default=2, ge=1)
    max_turns: int = Field(default=DEFAULT_MAX_TURNS, ge=1)
    max_tokens: int = Field(default=96, ge=0)
    agent_timeout_s: float = Field(default=0.0, ge=0)
    timeout_reference_tps: float = Field(default=20.0, ge=0)
    retries: int = Field(default=1, ge=0)
    ks: list[int] = Field(default_factory=lambda: [1])
    pass_threshold: float = Field(default=1.0, ge=0.0, le=1.0)
    output_dir: str = ""
    run_id: str = ""
    html: bool = True
    task_images: bool = True
    agent_network: bool = False
    network: bool = True
    sandbox_hosts: list[SandboxHostConfig] = Field(default_factory=list)

    @field_validator("sandbox_hosts")
    @classmethod
    def _check_hosts(cls, hosts: list[SandboxHostConfig]) -> list[SandboxHostConfig]:
        names = [h.name for h in hosts]
        if len(set(names)) != len(names):
            raise ValueError(f"sandbox host names must be unique, got {names}")
        if hosts and sum(h.capacity for h in hosts) < 1:
            raise ValueError("the sandbox hosts have no capacity (all 0)")
        return hosts

    @field_validator("ks")
    @classmethod
    def _check_ks(cls, ks: list[int]) -> list[int]:
        if not ks or any(k < 1 for k in ks):
            raise ValueError(f"each k of pass@k must be >= 1, got {ks}")
        return ks

    @model_validator(mode="after")
    def _check_model(self) -> BenchConfig:
        if self.model == "sglang" and not (self.sglang_url or self.launch_sglang):
            raise ValueError(
                "model (--model) = sglang needs sglang_url (--sglang-url) or launch_sglang "
                "(--launch-sglang)"
            )
        return self

    @field_validator("slice", mode="before")
    @classmethod
    def _check_slice(cls, raw: Any) -> str:
        if isinstance(raw, bool) or not isinstance(raw, str | int | float):
            raise ValueError(f"slice must be a string or a number, got {raw!r}")
        value = str(raw).strip()
        if value in ("auto", "default", "all"):
            return value
        if _slice_size(value) is None:
            raise ValueError(
                f"slice must be auto, default, all, a count >= 1 or a fraction in (0, 1), "
                f"got {value!r}"
            )
        return value


def _slice_size(value: str) -> int | float | None:
    """A count (int >= 1) or a fraction (float in (0, 1)) from a slice value, else None."""
    if re.fullmatch(r"\d+", value):
        return int(value) if int(value) >= 1 else None
    if re.fullmatch(r"0?\.\d+", value):
        frac = float(value)
        return frac if 0.0 < frac < 1.0 else None
    return None


def load_config(
    path: Path | str | None = None,
    overrides: dict[str, Any] | None = None,
    flags: dict[str, str] | None = None,
) -> BenchConfig:
    """Defaults ← the TOML file at ``path`` (if any) ← ``overrides`` (``None`` values are
    ignored: an option not given on the command line keeps the file's value).

    ``flags`` maps a key to its command-line option (``{"ks": "--k"}``): an error names
    both, ``ks (--k): ...``.

    Raises:
        ConfigError: unreadable TOML, unknown key, or a value of the wrong type / range.
    """
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{path}: {exc}") from None
    data.update({k: v for k, v in (overrides or {}).items() if v is not None})
    if data.get("tasks") and "suites" not in data:
        data["suites"] = []  # task directories alone: only those tasks, no built-in slice
    try:
        return BenchConfig(**data)
    except ValidationError as exc:
        problems = "; ".join(_problem(e, flags or {}) for e in exc.errors())
        raise ConfigError(f"invalid configuration: {problems}") from None


def _problem(error: Any, flags: dict[str, str]) -> str:
    """One pydantic error as ``key (--flag): message`` (``key: message`` without a flag;
    a check of the whole configuration names no key)."""
    loc = [str(p) for p in error["loc"]]
    msg = str(error["msg"]).removeprefix("Value error, ")
    if error.get("type") == "extra_forbidden":
        msg = "unknown key"
    if not loc:
        return msg
    key = loc[0]
    name = f"{key} ({flags[key]})" if key in flags else key
    return f"{'.'.join([name, *loc[1:]])}: {msg}"


def _default_slice(tasks: Sequence[Task]) -> list[Task]:
    """One task per category: the easiest, then the first id."""
    rank = {d: i for i, d in enumerate(DIFFICULTIES)}
    best: dict[str, Task] = {}
    for t in sorted(tasks, key=lambda t: (rank.get(t.difficulty or "", 9), t.id)):
        best.setdefault(t.category or "uncategorised", t)
    order = list(CATEGORIES)
    return sorted(
        best.values(), key=lambda t: (order.index(t.category) if t.category in order else 99, t.id)
    )


def _sample(tasks: list[Task], size: int | float, seed: int, suite: str) -> list[Task]:
    """``size`` tasks (a count, or a fraction rounded up) drawn with ``seed``, by id."""
    n = size if isinstance(size, int) else max(1, math.ceil(size * len(tasks)))
    rng = random.Random(f"{seed}|{suite}")
    return sorted(rng.sample(tasks, min(n, len(tasks))), key=lambda t: t.id)


def slice_suite(tasks: list[Task], cfg: BenchConfig, *, builtin: bool, suite: str) -> list[Task]:
    """The part of one suite that ``cfg.slice`` selects (see the module docstring):
    ``auto`` is ``default`` for the built-in suite and ``all`` for an external one; a
    count or fraction samples with ``cfg.slice_seed`` (the same seed, suite and tasks give
    the same sample)."""
    kind = cfg.slice
    if kind == "auto":
        kind = "default" if builtin else "all"
    if kind == "all":
        return tasks
    if kind == "default":
        return _default_slice(tasks)
    size = _slice_size(kind)
    assert size is not None  # checked by BenchConfig
    return _sample(tasks, size, cfg.slice_seed, suite)


def select_tasks(cfg: BenchConfig) -> list[Task]:
    """The tasks a configuration selects: every suite (sliced by :func:`slice_suite` unless
    ``task_ids`` are given) plus the explicit task directories, filtered by ``task_ids``.

    Raises:
        TaskLoadError: a task directory cannot be loaded.
        UnknownLayoutError: ``layout`` names no task layout.
        ConfigError: a requested task id is not found, or nothing is selected.
    """
    layout = get_layout(cfg.layout) if cfg.layout else None
    selected: list[Task] = []
    for suite in cfg.suites:
        builtin = suite == "builtin"
        loaded = load_builtin_suite() if builtin else load_suite(Path(suite), layout)
        if not cfg.task_ids:
            loaded = slice_suite(loaded, cfg, builtin=builtin, suite=suite)
        selected += loaded
    for p in map(Path, cfg.tasks):  # a file: a suite file (a dataset, an AgentBench file)
        selected += load_suite(p, layout) if p.is_file() else [load_task(p, layout)]
    if cfg.task_ids:
        by_id = {t.id: t for t in selected}
        missing = [i for i in cfg.task_ids if i not in by_id]
        if missing:
            raise ConfigError(f"task ids not found: {', '.join(missing)}")
        selected = [by_id[i] for i in cfg.task_ids]
    if not selected:
        raise ConfigError("no task selected")
    return selected
