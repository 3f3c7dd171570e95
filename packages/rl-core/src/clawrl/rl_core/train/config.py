"""The ``train`` run configuration: one TOML file, every value with a default.

Sections map to the dataclasses below (``[run]``, ``[model]``, ``[backend]``, ``[tasks]``,
``[rollout]``, ``[algo]``, ``[async]``, ``[cold_start]``, ``[eval]``, ``[logging]``).
Command-line overrides use dotted keys (``--set algo.lr=1e-4``) whose values are parsed as
TOML values (falling back to a plain string). The resolved configuration is saved as
``<run.out>/config.json`` next to the results.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import types
import typing
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from clawrl.bench import (
    DEFAULT_MAX_TURNS,
    SandboxHostConfig,
    parse_override_value,
    read_config_file,
)
from clawrl.bench.harness import UnknownHarnessError, get_harness
from clawrl.proxy import DefaultModelSpec, ModelKitError
from clawrl.rl_core.config import (
    CorrectionConfig,
    GRPOConfig,
    LoRAConfig,
    LossConfig,
    OptimConfig,
    PPOConfig,
    TrainerConfig,
)
from clawrl.rl_core.errors import ConfigError
from clawrl.sandbox import SandboxHost

__all__ = [
    "AlgoConfig",
    "AsyncConfig",
    "BackendConfig",
    "ColdStartConfig",
    "EvalConfig",
    "LoggingConfig",
    "ModelConfig",
    "RolloutConfig",
    "RunConfig",
    "TasksConfig",
    "TrainConfig",
    "apply_overrides",
    "load_config",
]


@dataclass
class RunConfig:
    """Attributes:
    out: results directory (JSONL, PNG, checkpoints, capture, resolved config).
    seed: seeds torch / numpy / random, the task draws and the backend's sampling.
    steps: RL steps (each: one batch of rollouts, one or more updates, one weight sync).
    checkpoint_every: write a checkpoint every N RL steps (0: only at the end).
    keep_checkpoints: how many recent checkpoints to keep.
    rank_timeout_s: under ``accelerate launch`` with several processes, how long ranks > 0
        wait for rank 0's next command (a step's rollouts, evaluations and weight sync must
        fit; see :mod:`clawrl.rl_core.train.ranks`).
    """

    out: str = "runs/train"
    seed: int = 0
    steps: int = 10
    checkpoint_every: int = 2
    keep_checkpoints: int = 2
    rank_timeout_s: float = 86400.0


@dataclass(frozen=True)
class ModelConfig(DefaultModelSpec):
    """The policy. ``path`` = an HF model directory (``~`` expanded) or a model kit name
    (:data:`clawrl.proxy.KNOWN_MODELS`, e.g. ``qwen2.5-coder-0.5b-instruct``: fetched and
    converted on first use, :func:`clawrl.proxy.resolve_model`); empty: clawrl-proxy's default tiny
    Qwen3 model, built locally (:meth:`~clawrl.proxy.DefaultModelSpec.build`) from the
    other keys, those of :class:`clawrl.proxy.DefaultModelSpec`: ``tokenizer``, ``seed``
    (of the random initialisation) and the architecture."""

    path: str = ""


@dataclass
class BackendConfig:
    """Inference backend behind the proxy.

    kind: ``embedded`` (transformers in this process; weights synced in-process) or
        ``sglang`` (a running server at ``sglang_url``; weights synced by
        ``/update_weights_from_disk`` through the proxy's load-weights admin call).
    max_batch_size: embedded backend's concurrent generations.
    device: embedded backend's torch device.
    dtype: embedded backend's serving dtype, ``fp32`` (exact logprobs), ``bf16`` or ``auto`` (bf16
        where the device has native bf16 kernels, else fp32).
    num_threads: embedded backend's torch threads (0: follow the machine).
    prefix_cache_mib: embedded backend's KV kept for prompts that start the same way,
        shared across sessions and dropped at every weight sync (0: off).
    sglang_router: ``sglang_url`` is an sglang-router in front of several SGLang workers
        (the proxy's ``SGLangRouterBackend``: weights synced to every worker).
    sglang_worker_urls: the router's workers (each gets the weight sync directly); empty:
        the router's own list (``GET /workers``).
    """

    kind: Literal["embedded", "sglang"] = "embedded"
    max_batch_size: int = 16
    device: str = "cpu"
    dtype: Literal["fp32", "bf16", "auto"] = "fp32"
    num_threads: int = 0
    prefix_cache_mib: float = 256.0
    sglang_url: str = ""
    sglang_router: bool = False
    sglang_worker_urls: list[str] = field(default_factory=list)


@dataclass
class TasksConfig:
    """Where tasks come from.

    family: ``learnable`` (bench's learnable family: train / held-out splits), ``chores``
        (bench's workspace-chores family, multi-step with exact rewards, in ClawGym's
        layout: train / held-out splits; see :func:`clawrl.bench.generate_chore_tasks`),
        ``builtin`` (bench's built-in suite; held-out = the same tasks), or ``path`` (a
        suite directory).
    train_n, heldout_n: instances drawn from the learnable or chores family's splits.
    tasks_per_step: tasks sampled per RL step (each gets ``rollout.samples`` rollouts per
        harness).
    path: the suite directory for ``family = "path"``.
    heldout_path: for ``family = "path"``, a second suite directory evaluated as the held-out
        set (empty: the held-out set is ``path`` itself, the training tasks).
    learnable_names, learnable_words: restrict the learnable family to its first file names
        and words (0: all 80 names / 90 words; see :func:`clawrl.bench.learnable_instances`).
    learnable_reward: ``graded`` (the mean of the three sub-scores: a gradient for near
        misses) or ``exact`` (1 iff the file holds the word, else 0; the sub-scores are only
        logged) — see :func:`clawrl.bench.generate_learnable_tasks`.
    chores_templates: the chores family's templates to draw from (empty: all of
        :data:`clawrl.bench.CHORE_TEMPLATES`).
    heldout_seed: the seed of the learnable or chores family's held-out draw. It does not
        follow ``run.seed``, so runs with different seeds are evaluated on the same tasks
        (the training tasks follow ``run.seed``).
    """

    family: Literal["learnable", "chores", "builtin", "path"] = "learnable"
    train_n: int = 64
    heldout_n: int = 16
    tasks_per_step: int = 4
    path: str = ""
    heldout_path: str = ""
    learnable_names: int = 0
    learnable_words: int = 0
    learnable_reward: Literal["graded", "exact"] = "graded"
    chores_templates: list[str] = field(default_factory=list)
    heldout_seed: int = 0


@dataclass
class RolloutConfig:
    """Rollouts through bench's runner (podman sandbox + proxy session each).

    harnesses: one or more harnesses (mix-harness when several: advantages per (task,
        harness) group): bench's names, an entry point of the group ``clawrl.harnesses``, or
        an import path ``module:Class`` (see ``clawrl.bench.harness.get_harness``).
    samples: rollouts per (task, harness) group (the GRPO group size).
    max_turns: the harness's turn / step limit (bench's ``DEFAULT_MAX_TURNS``, 8, for bench
        and train alike; the quickstarts' one-call tasks set 1).
    temperature: training sampling temperature imposed by the proxy (top_p = 1, no top_k).
    max_tokens: per-call output cap imposed by the proxy.
    verifier: where each rollout's verifier runs on the copied-out workspace: ``sandbox``
        (a fresh podman sandbox per verification, :class:`clawrl.bench.SandboxExecutor`)
        or ``host`` (a host subprocess, :class:`clawrl.bench.LocalExecutor`), only for tasks
        whose verifier does not execute workspace code (bench's learnable family): the run
        stops with a ConfigError before any rollout otherwise. The harness runs in its
        podman sandbox either way.
    sandbox_hosts: ``[[rollout.sandbox_hosts]]`` tables (``name``, ``capacity``, ``url`` or
        ``connection``, ``model_socket``; bench's :class:`~clawrl.bench.SandboxHostConfig`):
        the agent sandboxes spread over several podman hosts by free capacity, a host that
        disappears failing its rollouts as infra-errors (docs/scale-out.md). Empty: the
        local podman only. Verifier sandboxes stay local.
    user_model: the model that plays the user of multi-turn harnesses with a simulated user
        (``simulated-user-llm``): a model-kit name or an HF directory, served for the run by
        a second embedded backend (``backend.dtype``), its calls recorded in
        ``<out>/capture-user`` and never trained on. Empty: the policy plays the user too.
    """

    harnesses: list[str] = field(default_factory=lambda: ["reference"])
    samples: int = 4
    max_turns: int = DEFAULT_MAX_TURNS
    max_tokens: int = 96
    temperature: float = 1.0
    concurrency: int = 4
    agent_timeout_s: float = 120.0
    timeout_reference_tps: float = 20.0
    retries: int = 1
    max_leaves: int = 8
    verifier: Literal["sandbox", "host"] = "sandbox"
    sandbox_hosts: list[dict[str, Any]] = field(default_factory=list)
    user_model: str = ""

    def hosts(self) -> list[SandboxHost]:
        """The :class:`clawrl.sandbox.SandboxHost` of each ``sandbox_hosts`` table.

        Raises:
            ConfigError: a table with an unknown key, a missing name / capacity, a bad
                url / connection, duplicate names, or no capacity at all.
        """
        try:
            tables = [SandboxHostConfig.model_validate(h) for h in self.sandbox_hosts]
        except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
            raise ConfigError(f"rollout.sandbox_hosts: {exc}") from None
        names = [t.name for t in tables]
        if len(set(names)) != len(names):
            raise ConfigError(f"rollout.sandbox_hosts: duplicate names in {names}")
        if tables and sum(t.capacity for t in tables) < 1:
            raise ConfigError("rollout.sandbox_hosts: the total capacity must be >= 1")
        return [t.host() for t in tables]


#: TrainerConfig fields the train config sets from other sections, not from ``[algo]``: the
#: seed (``run.seed``), the logit temperature (``rollout.temperature``, the one the proxy
#: samples at) and the LR schedule's length (``run.steps`` × ``algo.updates_per_step``).
_DERIVED = frozenset({"seed", "temperature", "total_steps"})
#: TrainerConfig's sub-config fields and their classes.
_SUB_CLASSES: dict[str, type] = {
    "loss": LossConfig,
    "grpo": GRPOConfig,
    "ppo": PPOConfig,
    "corrections": CorrectionConfig,
    "optim": OptimConfig,
}
#: ``[algo]`` keys that are the train loop's own, not TrainerConfig's.
_LOOP_KEYS = ("updates_per_step", "drop_zero_std_groups", "shuffle_rewards")


def _algo_keys() -> dict[str, tuple[str | None, str]]:
    """The flat ``[algo]`` keys, read off TrainerConfig's dataclass fields: key → (sub-config
    name, or None for TrainerConfig itself; field name). ``name`` is ``algorithm``; a field
    name found in two sub-configs (``eps``) is prefixed by its sub-config (``grpo_eps``,
    ``optim_eps``)."""
    places: list[tuple[str | None, str]] = [
        (None, f.name)
        for f in dataclasses.fields(TrainerConfig)
        if f.name not in _SUB_CLASSES and f.name not in _DERIVED
    ]
    for sub, cls in _SUB_CLASSES.items():
        places += [(sub, f.name) for f in dataclasses.fields(cls) if f.name not in _DERIVED]
    count: dict[str, int] = {}
    for _, name in places:
        count[name] = count.get(name, 0) + 1
    keys: dict[str, tuple[str | None, str]] = {}
    for place, name in places:
        key = "name" if name == "algorithm" else name
        keys[f"{place}_{key}" if count[name] > 1 else key] = (place, name)
    return keys


@dataclass
class AlgoConfig:
    """The update: ``[algo]``. ``trainer`` is rl-core's :class:`~clawrl.rl_core.TrainerConfig`
    itself, so every default is TrainerConfig's (and its sub-configs'); the TOML addresses
    its fields by flat keys (:meth:`from_flat`): ``name`` (the algorithm), ``lr`` (optim),
    ``clip_eps_low`` (loss), ``value_coef`` (ppo), ``tis_cap`` (corrections), ... — every
    field of TrainerConfig and its sub-configs except the seed, temperature and schedule
    length, which come from ``run.seed``, ``rollout.temperature`` and ``run.steps``.

    updates_per_step: optimiser steps on each batch (the first is on-policy; later ones are
    corrected by the clipped ratio). drop_zero_std_groups: leave out groups whose rewards
    are all equal (their GRPO advantage is 0). shuffle_rewards: the control run — the
    rewards of a step's usable rollouts are permuted among them (seeded by the run's seed and
    the step) before the advantages, so the update carries no information about which
    rollout succeeded; the logged rewards stay the true ones. kl_coef > 0 adds a k3 KL term to a frozen copy
    of the policy as it was when RL started (after the cold start). value_lr: PPO value
    head's learning rate (unset or 0: ``lr``). In a TOML, keys under ``[algo.grpo]`` or
    ``[algo.ppo]`` apply only to that algorithm (see :func:`load_config`).
    """

    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    updates_per_step: int = 1
    drop_zero_std_groups: bool = False
    shuffle_rewards: bool = False

    @property
    def name(self) -> str:
        return self.trainer.algorithm

    @classmethod
    def from_flat(cls, values: dict[str, Any]) -> AlgoConfig:
        """Build from flat ``[algo]`` keys (unknown keys: ConfigError)."""
        keys = _algo_keys()
        if "bf16" in values:  # the key before ``precision`` (a saved config.json resumes)
            values = dict(values)
            legacy = values.pop("bf16")
            values.setdefault("precision", "bf16" if legacy is True else "fp32")
        unknown = set(values) - set(keys) - set(_LOOP_KEYS)
        if unknown:
            known = sorted([*keys, *_LOOP_KEYS])
            raise ConfigError(f"unknown key(s) in [algo]: {sorted(unknown)} (known: {known})")
        if values.get("name", "grpo") not in ("grpo", "ppo"):
            raise ConfigError(f"algo.name must be 'grpo' or 'ppo', got {values['name']!r}")
        top: dict[str, Any] = {}
        subs: dict[str, dict[str, Any]] = {sub: {} for sub in _SUB_CLASSES}
        for key, value in values.items():
            if key in _LOOP_KEYS:
                _check_value("algo", key, value, _field_type(cls, key))
                continue
            sub, name = keys[key]
            owner = TrainerConfig if sub is None else _SUB_CLASSES[sub]
            _check_value("algo", key, value, _field_type(owner, name))
            if name == "lora":
                value = _lora_from_table(value)
            if name == "value_lr" and value == 0:
                value = None  # 0 meant "lr" in earlier configs (a saved config.json resumes)
            if name == "betas" and isinstance(value, list):
                value = tuple(value)
            (top if sub is None else subs[sub])[name] = value
        try:
            trainer = TrainerConfig(
                **top, **{sub: _SUB_CLASSES[sub](**kw) for sub, kw in subs.items()}
            )
        except (ConfigError, TypeError) as exc:
            raise ConfigError(f"[algo]: {exc}") from exc
        return cls(trainer, **{k: values[k] for k in _LOOP_KEYS if k in values})

    def flat(self) -> dict[str, Any]:
        """The flat ``[algo]`` keys and their values (what ``config.json`` holds)."""
        out: dict[str, Any] = {}
        for key, (sub, name) in _algo_keys().items():
            value = getattr(self.trainer if sub is None else getattr(self.trainer, sub), name)
            if isinstance(value, LoRAConfig):
                value = dataclasses.asdict(value)
            out[key] = list(value) if isinstance(value, tuple) else value
        return {**out, **{k: getattr(self, k) for k in _LOOP_KEYS}}


def _lora_from_table(value: Any) -> LoRAConfig | None:
    """``[algo] lora``: a table ``{r, alpha, target_modules, dropout}`` (missing keys take
    :class:`~clawrl.rl_core.LoRAConfig`'s defaults), or None / absent for full fine-tuning.

    Raises:
        ConfigError: not a table, an unknown key, or a bad value, naming ``[algo] lora.KEY``.
    """
    if value is None or isinstance(value, LoRAConfig):
        return value
    if not isinstance(value, dict):
        raise ConfigError(
            f"[algo] lora: expected a table such as {{r = 16, alpha = 32}}, got {value!r}"
        )
    known = [f.name for f in dataclasses.fields(LoRAConfig)]
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise ConfigError(f"[algo] lora: unknown key(s) {unknown} (known: {known})")
    for key, item in value.items():
        _check_value("algo", f"lora.{key}", item, _field_type(LoRAConfig, key))
    try:
        return LoRAConfig(**value)
    except ConfigError as exc:
        raise ConfigError(f"[algo] {exc}") from None


@dataclass
class AsyncConfig:
    """Asynchronous mode: rollouts of the next batches are collected while the trainer
    updates; a rollout is trained on only if its oldest call's policy version is at most
    ``max_staleness`` versions behind the trainer (older ones are dropped and counted).
    The recorded rollout logprobs drive rl-core's corrections (TIS / masks)."""

    enabled: bool = False
    max_staleness: int = 1


@dataclass
class ColdStartConfig:
    """Supervised cold start on scripted-policy trajectories captured through the same
    harness path (the proxy's ScriptedBackend — a test backend — replays the solution as
    the model's turns), before RL.

    tasks: training tasks whose scripted trajectories are captured.
    steps: SFT optimiser steps at most; batch_size: trajectories per step.
    call_style: how the scripted turns write tool calls: ``"tags"`` (the chat template's
    ``<tool_call>`` blocks) or ``"fenced"`` (a ```` ```json ```` block per call, the way
    Qwen2.5-Coder writes them: its ``<tool_call>`` token is near-impossible for it, log-prob
    about -22 at a turn's start, and SFT on it taught it ``<|im_start|>`` in its place).
    eval_every: evaluate on held-out tasks every N SFT steps (0: only at the end);
    eval_from: ... but not before SFT step ``eval_from`` (the last step is always
    evaluated); stop_at_reward: stop the cold start once the held-out eval reward reaches it.
    """

    enabled: bool = False
    tasks: int = 32
    steps: int = 40
    batch_size: int = 16
    lr: float = 1e-3
    call_style: Literal["tags", "fenced"] = "tags"
    eval_every: int = 0
    eval_from: int = 0
    stop_at_reward: float = 1.0

    def evaluates_at(self, step: int) -> bool:
        """Whether the held-out evaluation runs after SFT step ``step`` (1-based)."""
        if step == self.steps:
            return True
        return bool(self.eval_every) and step % self.eval_every == 0 and step >= self.eval_from


@dataclass
class EvalConfig:
    """Held-out evaluation (training sampling; its rollouts are never trained on).
    every: evaluate every N RL steps (0: only before RL and at the end).
    greedy: evaluate a second time with greedy decoding (T = 0), logged as
    ``eval_greedy_*``: a gain at the training temperature that greedy decoding already had
    is only a sharper sampler.
    harnesses: the harnesses the held-out tasks run through (empty: ``rollout.harnesses``).
    A harness listed here and not in ``rollout.harnesses`` is never trained through: its
    before / after figures (``eval_pass_rate/<harness>``) measure transfer."""

    enabled: bool = True
    samples: int = 1
    every: int = 0
    greedy: bool = False
    harnesses: list[str] = field(default_factory=list)


@dataclass
class LoggingConfig:
    """JSONL is always written. ``tensorboard`` mirrors numeric values to TensorBoard (the
    ``tensorboard`` package: ``clawrl-rl-core[tensorboard]``); ``wandb`` logs them to Weights
    & Biases, ``"offline"`` (a run folder under ``<out>/wandb``, synced later with ``wandb
    sync``) or ``"online"`` (the ``wandb`` package: ``clawrl-rl-core[wandb]``); ``""`` is off.
    ``wandb_project`` names the W&B project."""

    tensorboard: bool = False
    wandb: str = ""
    wandb_project: str = "clawrl"
    plot: bool = True
    progress: bool = True


@dataclass
class TrainConfig:
    """The whole run (see the module docstring)."""

    run: RunConfig = field(default_factory=RunConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    backend: BackendConfig = field(default_factory=BackendConfig)
    tasks: TasksConfig = field(default_factory=TasksConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    async_: AsyncConfig = field(default_factory=AsyncConfig)
    cold_start: ColdStartConfig = field(default_factory=ColdStartConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raises ConfigError on values the loop cannot run with."""
        if self.run.steps < 0 or self.run.checkpoint_every < 0 or self.run.keep_checkpoints < 1:
            raise ConfigError("need run.steps >= 0, run.checkpoint_every >= 0, keep >= 1")
        if self.run.rank_timeout_s <= 0:
            raise ConfigError("run.rank_timeout_s must be > 0")
        if not self.rollout.harnesses:
            raise ConfigError("rollout.harnesses is empty")
        if self.logging.tensorboard and importlib.util.find_spec("tensorboard") is None:
            raise ConfigError(
                "[logging] tensorboard = true needs the tensorboard package (pip install "
                "'clawrl-rl-core[tensorboard]')"
            )
        if self.logging.wandb not in ("", "offline", "online"):
            raise ConfigError(
                f"[logging] wandb must be 'offline', 'online' or '' (off), "
                f"got {self.logging.wandb!r}"
            )
        if self.logging.wandb and importlib.util.find_spec("wandb") is None:
            raise ConfigError(
                "[logging] wandb needs the wandb package (pip install 'clawrl-rl-core[wandb]')"
            )
        if self.logging.wandb and not self.logging.wandb_project.strip():
            raise ConfigError("[logging] wandb_project is empty")
        plays_user = False
        for section, names in (("rollout", self.rollout.harnesses), ("eval", self.eval.harnesses)):
            for harness in names:
                try:
                    plays_user |= get_harness(harness).plays_user
                except UnknownHarnessError as exc:
                    raise ConfigError(f"[{section}] harnesses: {exc}") from None
        if self.rollout.user_model and not plays_user:
            raise ConfigError(
                "rollout.user_model is the model that plays a simulated user: none of the "
                "harnesses has one (e.g. simulated-user-llm)"
            )
        if self.rollout.samples < 1 or self.tasks.tasks_per_step < 1:
            raise ConfigError("need rollout.samples >= 1 and tasks.tasks_per_step >= 1")
        if self.algo.name == "grpo" and self.rollout.samples < 2:
            raise ConfigError("GRPO needs rollout.samples >= 2 (a group)")
        if self.algo.name not in ("grpo", "ppo"):
            raise ConfigError(f"algo.name must be 'grpo' or 'ppo', got {self.algo.name!r}")
        if self.backend.kind not in ("embedded", "sglang"):
            raise ConfigError("backend.kind must be 'embedded' or 'sglang'")
        if self.backend.dtype not in ("fp32", "bf16", "auto"):
            raise ConfigError(
                f"backend.dtype must be 'fp32', 'bf16' or 'auto', got {self.backend.dtype!r}"
            )
        if self.backend.num_threads < 0 or not self.backend.prefix_cache_mib >= 0:
            raise ConfigError("backend.num_threads and backend.prefix_cache_mib must be >= 0")
        if self.backend.kind == "sglang" and not self.backend.sglang_url:
            raise ConfigError("backend.kind = 'sglang' needs backend.sglang_url")
        if self.backend.sglang_worker_urls and not self.backend.sglang_router:
            raise ConfigError("backend.sglang_worker_urls needs backend.sglang_router = true")
        if self.tasks.family not in ("learnable", "chores", "builtin", "path"):
            raise ConfigError(
                "tasks.family must be 'learnable', 'chores', 'builtin' or 'path', "
                f"got {self.tasks.family!r}"
            )
        if self.tasks.learnable_reward not in ("graded", "exact"):
            raise ConfigError(
                "tasks.learnable_reward must be 'graded' or 'exact', "
                f"got {self.tasks.learnable_reward!r}"
            )
        if self.tasks.family == "path" and not self.tasks.path:
            raise ConfigError("tasks.family = 'path' needs tasks.path")
        if self.tasks.heldout_path and self.tasks.family != "path":
            raise ConfigError("tasks.heldout_path is for tasks.family = 'path'")
        if self.algo.updates_per_step < 1:
            raise ConfigError("algo.updates_per_step must be >= 1")
        if self.cold_start.call_style not in ("tags", "fenced"):
            raise ConfigError(
                "cold_start.call_style must be 'tags' or 'fenced', "
                f"got {self.cold_start.call_style!r}"
            )
        if self.async_.max_staleness < 0:
            raise ConfigError("async.max_staleness must be >= 0")
        if self.eval.greedy and self.async_.enabled:
            # the greedy pass sets the proxy's sampling for every call while it runs, and in
            # asynchronous mode the next batches' training rollouts run at the same time
            raise ConfigError(
                "eval.greedy cannot be used with async.enabled: the next batches' training "
                "rollouts would be sampled greedily during the greedy evaluation"
            )
        if self.rollout.verifier not in ("sandbox", "host"):
            raise ConfigError(
                f"rollout.verifier must be 'sandbox' or 'host', got {self.rollout.verifier!r}"
            )
        if self.rollout.timeout_reference_tps < 0:
            raise ConfigError("rollout.timeout_reference_tps must be >= 0 (0: never scaled)")
        if self.rollout.temperature <= 0:
            raise ConfigError("rollout.temperature must be > 0 (logprobs are taken at T)")
        self.rollout.hosts()
        if not self.model.path:
            try:
                self.model.validate()
            except ModelKitError as exc:
                raise ConfigError(f"[model]: {exc}") from exc

    def to_dict(self) -> dict[str, Any]:
        """Plain dict with TOML section names (``async`` rather than ``async_``)."""
        d = dataclasses.asdict(self)
        d["async"] = d.pop("async_")
        d["algo"] = self.algo.flat()
        return d

    def trainer_config(self) -> TrainerConfig:
        """rl-core's TrainerConfig for the RL updates: ``algo.trainer`` with the seed, the
        temperature and the schedule length taken from ``run`` and ``rollout``."""
        t = self.algo.trainer
        return dataclasses.replace(
            t,
            seed=self.run.seed,
            loss=dataclasses.replace(t.loss, temperature=self.rollout.temperature),
            optim=dataclasses.replace(
                t.optim, total_steps=max(1, self.run.steps * self.algo.updates_per_step)
            ),
        )

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")


_SECTIONS: dict[str, type] = {
    "run": RunConfig,
    "model": ModelConfig,
    "backend": BackendConfig,
    "tasks": TasksConfig,
    "rollout": RolloutConfig,
    "algo": AlgoConfig,
    "async": AsyncConfig,
    "cold_start": ColdStartConfig,
    "eval": EvalConfig,
    "logging": LoggingConfig,
}


#: Keys of earlier versions, ignored with a warning (a saved config.json still resumes):
#: the proxy's close now returns once every call is committed, so nothing settles.
_REMOVED_KEYS = {"rollout": ("settle_s", "settle_timeout_s")}
#: Keys of earlier versions under their new name (a saved config.json still resumes).
_RENAMED_KEYS = {"model": {"init_seed": "seed"}}


def _build(data: dict[str, Any]) -> TrainConfig:
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        cls = _SECTIONS.get(name)
        if cls is None:
            raise ConfigError(f"unknown config section [{name}] (known: {sorted(_SECTIONS)})")
        if not isinstance(value, dict):
            raise ConfigError(f"[{name}] must be a table")
        if name == "algo":
            kwargs["algo"] = AlgoConfig.from_flat(value)
            continue
        removed = [k for k in _REMOVED_KEYS.get(name, ()) if k in value]
        if removed:
            warnings.warn(f"[{name}] {removed}: no longer used, ignored", stacklevel=2)
            value = {k: v for k, v in value.items() if k not in removed}
        renamed = _RENAMED_KEYS.get(name, {})
        value = {renamed.get(k, k): v for k, v in value.items()}
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(value) - known
        if unknown:
            raise ConfigError(
                f"unknown key(s) in [{name}]: {sorted(unknown)} (known: {sorted(known)})"
            )
        for key, item in value.items():
            _check_value(name, key, item, _field_type(cls, key))
        try:
            section = cls(**value)
        except TypeError as exc:
            raise ConfigError(f"[{name}]: {exc}") from exc
        kwargs["async_" if name == "async" else name] = section
    return TrainConfig(**kwargs)


def _field_type(cls: type, name: str) -> Any:
    """The resolved annotation of field ``name`` of dataclass ``cls`` (``Any`` if it cannot
    be resolved)."""
    try:
        return typing.get_type_hints(cls).get(name, Any)
    except (NameError, TypeError):
        return Any


def _type_ok(value: Any, hint: Any) -> bool:
    """Whether a TOML / JSON value fits a field's annotation (a tuple may be a list, a float
    an integer; nested dataclasses, choices and unknown forms are left to the
    constructors and :meth:`TrainConfig.validate`)."""
    if hint is Any or (value is None and hint is type(None)):
        return True
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, a) for a in args)
    if origin is typing.Literal:
        return True  # TrainConfig.validate names the choices
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint in (str, Path):
        return isinstance(value, str)
    if origin is list or hint is list:
        return isinstance(value, list) and all(_type_ok(v, args[0]) for v in value if args)
    if origin is tuple or hint is tuple:
        return isinstance(value, list | tuple)
    if origin is dict or hint is dict:
        return isinstance(value, dict) and (
            len(args) != 2 or all(_type_ok(v, args[1]) for v in value.values())
        )
    return True


def _type_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def _check_value(section: str, key: str, value: Any, hint: Any) -> None:
    """Raises ConfigError naming ``[section] key`` when ``value`` does not fit ``hint``."""
    if not _type_ok(value, hint):
        raise ConfigError(f"[{section}] {key}: expected {_type_name(hint)}, got {value!r}")


_ALGO_TABLES = ("grpo", "ppo")  # [algo.NAME] tables: keys for that algorithm only


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``section.key=value`` overrides (values parsed as TOML) to a raw config dict;
    ``algo.ppo.key=value`` sets a key of a per-algorithm table (see :func:`load_config`).

    Raises:
        ConfigError: an override without ``=`` or without a section.
    """
    out = {
        k: {kk: dict(vv) if isinstance(vv, dict) else vv for kk, vv in v.items()}
        if isinstance(v, dict)
        else v
        for k, v in data.items()
    }
    for item in overrides:
        key, sep, raw = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or not dot or not name:
            raise ConfigError(f"override {item!r} is not section.key=value")
        table = out.setdefault(section, {})
        if not isinstance(table, dict):
            raise ConfigError(f"[{section}] must be a table")
        sub, dot, leaf = name.partition(".")
        if dot and section == "algo" and sub == "lora" and leaf:  # algo.lora.r=8
            lora = table.get("lora")
            value = parse_override_value(raw.strip())
            table["lora"] = {**(lora if isinstance(lora, dict) else {}), leaf: value}
        elif dot and section == "algo" and sub in _ALGO_TABLES and leaf:
            sub_table = table.setdefault(sub, {})
            if not isinstance(sub_table, dict):
                raise ConfigError(f"[algo.{sub}] must be a table")
            sub_table[leaf] = parse_override_value(raw.strip())
        else:
            table[name] = parse_override_value(raw.strip())
    return out


def _select_algo_table(data: dict[str, Any], name: str) -> dict[str, Any]:
    """[algo] with the keys of its [algo.NAME] table laid over it; the other algorithm's
    table is dropped."""
    algo = data.get("algo")
    if not isinstance(algo, dict):
        return data
    algo = dict(algo)
    tables = {k: algo.pop(k) for k in _ALGO_TABLES if k in algo}
    for k, t in tables.items():
        if not isinstance(t, dict):
            raise ConfigError(f"[algo.{k}] must be a table")
        if "name" in t:
            raise ConfigError(f"[algo.{k}] cannot set name (it applies when name = {k!r})")
    algo.update(tables.get(name, {}))
    return {**data, "algo": algo}


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> TrainConfig:
    """Read a TOML (or a saved ``config.json``) and apply overrides.

    ``[algo.grpo]`` / ``[algo.ppo]`` tables hold keys that apply only when ``algo.name`` is
    that algorithm (``--algo ppo``), laid over ``[algo]``; overrides (``--set``) apply last,
    so ``algo.KEY=...`` on the command line wins over both.

    Raises:
        ConfigError: unreadable file, unknown sections / keys, invalid values.
    """
    data: dict[str, Any] = {}
    if path is not None:
        data = read_config_file(path, ConfigError)
    overrides = overrides or []
    algo = apply_overrides(data, overrides).get("algo")
    default = TrainerConfig.algorithm
    name = algo.get("name", default) if isinstance(algo, dict) else default
    data = apply_overrides(_select_algo_table(data, name), overrides)
    return _build(_select_algo_table(data, name))
