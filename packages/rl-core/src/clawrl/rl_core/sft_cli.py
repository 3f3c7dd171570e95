"""``sft``: tree-packed supervised fine-tuning of a model on chat trajectories (ISE output).

    uv run sft --trajectories data/traj.jsonl --model smollm2-135m-instruct --out runs/sft \\
               [--steps N | --epochs E] [--batch-size B] [--lr LR] [--seed S] \\
               [--where outcome.verified=1 ...] [--config sft.toml] [--set key=value ...]

Every trajectory is rendered with the proxy's renderer of the model
(``clawrl.proxy.ChatRenderer.from_model_dir``): the family-adapted prompt the proxy builds at
inference, the tool prompt injected where the model's chat template ignores tools, client text
that spells a control token encoded as text. A trajectory that cannot be rendered (no
assistant message, a message without a role, a turn whose rendering does not extend its
prompt, a path longer than the token budget or the model's context) is reported and skipped.
Each step packs a batch of trajectories into one prefix tree (:func:`pack_sft_calls`) and runs
:meth:`Trainer.sft_step` (float32 AdamW on CPU). Outputs in ``--out``: ``config.json`` (the
resolved configuration), ``metrics.jsonl`` (one line per step), ``summary.json`` and
``model/`` (an HF directory with the tokenizer, chat template and generation config:
``bench --model-dir`` / ``[model] path``).

Configuration: defaults < ``--config`` (a flat TOML table of the keys of
:class:`SFTRunConfig`, or a saved ``config.json``) < ``--set key=value`` < the named flags.
Needs the ``[train]`` extra (clawrl.proxy, clawrl.bench).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from clawrl.rl_core.config import Aggregation
from clawrl.rl_core.errors import ConfigError, RLCoreError, SFTDataError

if TYPE_CHECKING:
    from clawrl.prefixtree import Call, PackedTree
    from clawrl.proxy import ChatRenderer
    from clawrl.rl_core.sft import ChatRenderFn

__all__ = ["SFTRunConfig", "main", "matches_where", "parse_where", "proxy_render"]

#: Files of the source model directory copied next to the exported weights (those present).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "generation_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
)


@dataclass
class SFTRunConfig:
    """The ``sft`` command's configuration (every value has a default but ``trajectories``,
    ``model`` and ``out``).

    Attributes:
        trajectories: trajectory JSONL files (docs/architecture.md, "Trajectory").
        model: a model-kit name (``smollm2-135m-instruct``: fetched and cached by
            ``clawrl.proxy.resolve_model``) or an HF model directory.
        out: the results directory.
        steps: optimiser steps; None: ``epochs`` × ceil(n / batch_size).
        epochs: passes over the n used trajectories when ``steps`` is None.
        batch_size: trajectories per step, packed into one tree (at most n are used).
        lr, weight_decay, max_grad_norm, schedule, warmup_steps: AdamW and its LR schedule
            (``transformers.get_scheduler`` name; the schedule spans the run's steps).
        seed: seeds torch / numpy / random and the batch order.
        where: ``dotted.path=VALUE`` filters, all of which a trajectory must match
            (:func:`matches_where`).
        target_tokens: a token budget for comparing datasets: the used trajectories are
            taken in a seeded random order until their assistant (trained) tokens reach it
            (the last one taken may cross it); 0: every trajectory.
        aggregation: SFT loss aggregation (``unique_token_mean``: a token shared by several
            trajectories counts once).
        token_budget: most tokens per forward (trees are split, results unchanged); 0: no
            limit. A trajectory with a longer path is skipped.
        chunk_size: vocabulary-projection rows per chunk.
        precision: "fp32", "bf16" (bf16 autocast over float32 master weights) or "auto"
            (bf16 where the device has native bf16 kernels, else fp32); see the trainer's
            ``TrainerConfig.precision``.
        call_style: how the trained assistant turns write their tool calls: ``"tags"`` (the
            chat template's rendering, e.g. ``<tool_call>`` blocks), ``"fenced"`` (a
            ```` ```json ```` block per call, which the proxy's parser reads for the qwen2
            and llama families) or ``"auto"``: fenced for the qwen2 family, else tags.
            Qwen2.5-Coder cannot emit its ``<tool_call>`` token (log-prob about -22 at a
            turn's start); SFT on tags taught it a near-uniform guess in that place, and a
            student that scored 0. The history in a prompt stays as the proxy renders it
            at inference.
        progress: a rich progress bar (else one plain line per step).
    """

    trajectories: list[str] = field(default_factory=list)
    model: str = ""
    out: str = ""
    steps: int | None = None
    epochs: int = 1
    batch_size: int = 4
    lr: float = 1e-5
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    schedule: str = "constant"
    warmup_steps: int = 0
    seed: int = 0
    where: list[str] = field(default_factory=list)
    target_tokens: int = 0
    aggregation: str = "unique_token_mean"
    token_budget: int = 8192
    chunk_size: int = 1024
    precision: str = "fp32"
    call_style: str = "auto"
    progress: bool = True

    def __post_init__(self) -> None:
        """Raises: ConfigError: a value of the wrong type or out of range."""
        for f in dataclasses.fields(self):
            _check_type(f.name, getattr(self, f.name), f.type)
        if isinstance(self.trajectories, str):
            self.trajectories = [self.trajectories]
        if isinstance(self.where, str):
            self.where = [self.where]
        if not self.trajectories:
            raise ConfigError("no trajectory files (--trajectories FILE ...)")
        if not self.model:
            raise ConfigError("no model (--model NAME_OR_DIR)")
        if not self.out:
            raise ConfigError("no results directory (--out DIR)")
        if self.steps is not None and self.steps < 1:
            raise ConfigError(f"steps must be >= 1, got {self.steps}")
        for name in ("epochs", "batch_size", "chunk_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.lr <= 0 or self.weight_decay < 0 or self.max_grad_norm <= 0:
            raise ConfigError("need lr > 0, weight_decay >= 0, max_grad_norm > 0")
        if self.warmup_steps < 0 or self.token_budget < 0 or self.target_tokens < 0:
            raise ConfigError("need warmup_steps >= 0, token_budget >= 0, target_tokens >= 0")
        if self.precision not in ("fp32", "bf16", "auto"):
            raise ConfigError(f"precision must be 'fp32', 'bf16' or 'auto', got {self.precision!r}")
        if self.call_style not in ("auto", "tags", "fenced"):
            raise ConfigError(
                f"call_style must be 'auto', 'tags' or 'fenced', got {self.call_style!r}"
            )
        if self.aggregation not in get_args(Aggregation):
            raise ConfigError(
                f"aggregation must be one of {', '.join(get_args(Aggregation))}, "
                f"got {self.aggregation!r}"
            )
        from transformers import SchedulerType

        schedules = [t.value for t in SchedulerType]
        if self.schedule not in schedules:
            raise ConfigError(f"schedule must be one of {', '.join(schedules)}")
        for w in self.where:
            parse_where(w)


_TYPES: dict[str, tuple[type, ...]] = {
    "list[str]": (list, str),
    "str": (str,),
    "int | None": (int, type(None)),
    "int": (int,),
    "float": (float, int),
    "bool": (bool,),
}


def _check_type(name: str, value: Any, annotation: Any) -> None:
    allowed = _TYPES[str(annotation)]
    bad = not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed)
    if isinstance(value, list):
        bad = bad or not all(isinstance(x, str) for x in value)
    if bad:
        raise ConfigError(f"{name}: expected {annotation}, got {value!r}")


def parse_where(text: str) -> tuple[list[str], Any]:
    """``"a.b.c=VALUE"`` → (``["a", "b", "c"]``, VALUE read as JSON, else the plain string).

    Raises:
        ConfigError: no ``=``, or an empty key or path segment.
    """
    key, sep, raw = text.partition("=")
    path = key.strip().split(".")
    if not sep or not all(path):
        raise ConfigError(f"--where {text!r}: expected dotted.key=VALUE")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return path, value


def _json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values: numbers numerically (1 == 1.0), booleans only to booleans."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return bool(a == b)


def matches_where(trajectory: Mapping[str, Any], filters: Sequence[tuple[list[str], Any]]) -> bool:
    """Whether ``trajectory`` matches every ``(path, value)`` filter (:func:`parse_where`):
    the value at the dotted path (object keys; a list takes an integer segment) equals
    ``value``. A path that does not exist does not match."""
    for path, want in filters:
        cur: Any = trajectory
        for seg in path:
            if isinstance(cur, Mapping) and seg in cur:
                cur = cur[seg]
            elif (
                isinstance(cur, list)
                and seg.lstrip("-").isdigit()
                and -len(cur) <= int(seg) < len(cur)
            ):
                cur = cur[int(seg)]
            else:
                return False
        if not _json_equal(cur, want):
            return False
    return True


def proxy_render(renderer: ChatRenderer, call_style: str = "tags") -> ChatRenderFn:
    """The ``render`` callable of :func:`~clawrl.rl_core.sft.render_sft_calls` that gives the
    prompt ids the proxy builds at inference: ``renderer.render_text`` (messages adapted to
    the model family, the tool prompt injected where the template ignores tools), encoded
    with client text that spells a control token kept as text (``defuse`` +
    ``encode_unit``, as the proxy does). With ``call_style`` ``"fenced"``, a conversation
    rendered without the generation prompt whose last message is an assistant turn with
    ``tool_calls`` has that turn's calls written as ```` ```json ```` blocks in its text
    (``clawrl.proxy.format_assistant_text``): the trained completion is what the model
    generates, the earlier turns what the proxy renders as history.

    Raises (from the callable):
        SFTDataError: the conversation cannot be rendered (the template rejects it, or a
            message is malformed: e.g. ``tool_calls`` that are not function-call objects).
    """
    from clawrl.proxy import ProxyRequestError

    def render(
        messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, gen: bool
    ) -> list[int]:
        if call_style != "tags" and not gen and messages:
            messages = [*messages[:-1], _restyled(messages[-1], call_style)]
        try:
            text = renderer.render_text(messages, tools, add_generation_prompt=gen)
            (safe_messages, safe_tools), changed = renderer.defuse([messages, tools])
            if not changed:
                return renderer.encode(text)
            defused = renderer.render_text(safe_messages, safe_tools, add_generation_prompt=gen)
            return renderer.encode_unit(text, defused)
        except ProxyRequestError as exc:
            raise SFTDataError(str(exc)) from exc
        except (TypeError, ValueError, KeyError, AttributeError) as exc:  # malformed messages
            raise SFTDataError(f"cannot render: {type(exc).__name__}: {exc}") from exc

    return render


def _restyled(message: dict[str, Any], call_style: str) -> dict[str, Any]:
    """``message`` with its ``tool_calls`` written into its content in ``call_style`` (an
    assistant turn with calls; any other message unchanged).

    Raises:
        SFTDataError: a call that is not a function call with JSON-object arguments.
    """
    from clawrl.proxy import format_assistant_text

    calls = message.get("tool_calls")
    if message.get("role") != "assistant" or not calls:
        return message
    parsed: list[tuple[str, dict[str, Any]]] = []
    try:
        for call in calls:
            fn = call["function"]
            args = fn.get("arguments") or {}
            if isinstance(args, str):
                args = json.loads(args)
            if not isinstance(fn["name"], str) or not isinstance(args, dict):
                raise TypeError("a call needs a string name and object arguments")
            parsed.append((fn["name"], args))
    except (TypeError, KeyError, ValueError) as exc:
        raise SFTDataError(f"cannot restyle a tool call: {type(exc).__name__}: {exc}") from exc
    content = message.get("content")
    text = format_assistant_text(
        content=content if isinstance(content, str) else "",
        tool_calls=parsed,
        call_style=call_style,
    )
    out = {k: v for k, v in message.items() if k != "tool_calls"}
    out["content"] = text
    return out


# ------------------------------------------------------------------------- configuration


def _parser() -> argparse.ArgumentParser:
    from clawrl.bench import add_config_flags

    p = argparse.ArgumentParser(
        prog="sft",
        description=(__doc__ or "").splitlines()[0],
        epilog="Outputs: <out>/config.json, metrics.jsonl, summary.json, model/.",
    )
    p.add_argument("--trajectories", nargs="+", metavar="FILE", help="trajectory JSONL files")
    p.add_argument("--model", metavar="NAME_OR_DIR", help="model-kit name or HF model directory")
    p.add_argument("--out", metavar="DIR", help="results directory")
    p.add_argument("--steps", type=int, help="optimiser steps (default: epochs x batches)")
    p.add_argument("--epochs", type=int, help="passes over the trajectories (default 1)")
    p.add_argument("--batch-size", type=int, help="trajectories per step (default 4)")
    p.add_argument("--lr", type=float, help="AdamW learning rate (default 1e-5)")
    p.add_argument("--seed", type=int, help="seed (default 0)")
    p.add_argument(
        "--where",
        nargs="+",
        action="extend",
        metavar="KEY=VALUE",
        help="keep trajectories whose dotted KEY equals VALUE (JSON, else a string); all must hold",
    )
    p.add_argument("--no-progress", action="store_true", help="plain log lines")
    add_config_flags(
        p,
        config_help="TOML file of configuration keys (or a saved config.json)",
        set_metavar="KEY=VALUE",
        set_help="override a configuration key (TOML value syntax)",
    )
    return p


def _resolve_config(args: argparse.Namespace) -> SFTRunConfig:
    """Defaults < ``--config`` < ``--set`` < named flags.

    Raises:
        ConfigError: an unreadable config file, an unknown key, a bad ``--set`` or value.
    """
    from clawrl.bench import parse_override_value, read_config_file

    values: dict[str, Any] = {}
    if args.config is not None:
        values.update(read_config_file(args.config, ConfigError))
    for item in args.overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected key=value")
        values[key.strip()] = parse_override_value(raw)
    for key in ("trajectories", "model", "out", "steps", "epochs", "batch_size", "lr", "seed"):
        if getattr(args, key) is not None:
            values[key] = getattr(args, key)
    if args.where:
        values["where"] = args.where
    if args.no_progress:
        values["progress"] = False
    known = {f.name for f in dataclasses.fields(SFTRunConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown configuration key(s): {', '.join(unknown)}")
    return SFTRunConfig(**values)


# ------------------------------------------------------------------------------- data


@dataclass
class _Loaded:
    """The trajectories: those used (rendered), and the counts of the rest."""

    read: int = 0
    dropped_by_where: int = 0
    used: list[tuple[str, list[Call]]] = field(default_factory=list)
    target_tokens: int = 0  # the assistant tokens of ``used``
    skipped: list[dict[str, Any]] = field(default_factory=list)


def _longest_path(calls: Sequence[Call]) -> int:
    return max(int(c.num_tokens) for c in calls)


def _load_trajectories(
    cfg: SFTRunConfig,
    render: ChatRenderFn,
    max_positions: int | None,
    say: Callable[[str], None],
) -> _Loaded:
    """Read, filter and render every trajectory; a trajectory that cannot be rendered or is
    too long is skipped with its reason.

    Raises:
        SFTDataError: a file cannot be read, or a line is not a JSON object with a
            ``messages`` list.
        ConfigError: a bad ``where`` filter.
    """
    from clawrl.rl_core.sft import read_trajectories, render_sft_calls

    filters = [parse_where(w) for w in cfg.where]
    out = _Loaded()
    limits = [(n, what) for n, what in ((cfg.token_budget, "token_budget"),) if n]
    if max_positions:
        limits.append((max_positions, "the model's max_position_embeddings"))
    for path in cfg.trajectories:
        for k, tr in enumerate(read_trajectories(path), 1):
            out.read += 1
            if not matches_where(tr, filters):
                out.dropped_by_where += 1
                continue
            tid = str(tr.get("id", f"{Path(path).name}#{k}"))
            rid = f"t{len(out.used)}"  # unique rollout id (ids may repeat across files)
            try:
                calls = render_sft_calls(tr, None, trajectory_id=rid, render=render)
                longest = _longest_path(calls)
                for limit, what in limits:
                    if longest > limit:
                        raise SFTDataError(
                            f"a path of {longest} tokens is longer than {what} ({limit})"
                        )
            except SFTDataError as exc:
                reason = (
                    str(exc)
                    .replace(f"trajectory {rid!r}: ", "")
                    .replace(f"trajectory {rid!r} ", "")
                )
                out.skipped.append({"file": str(path), "index": k, "id": tid, "reason": reason})
                say(f"skipped {path} trajectory {k} ({tid}): {reason}")
                continue
            out.used.append((rid, calls))
    if cfg.target_tokens:
        out.used, out.target_tokens = _within_budget(out.used, cfg.target_tokens, cfg.seed)
    else:
        out.target_tokens = sum(_target_tokens(calls) for _, calls in out.used)
    return out


def _target_tokens(calls: Sequence[Call]) -> int:
    """The assistant tokens a trajectory trains (its calls' completions)."""
    return sum(len(c.completion_ids) for c in calls)


def _within_budget(
    used: list[tuple[str, list[Call]]], budget: int, seed: int
) -> tuple[list[tuple[str, list[Call]]], int]:
    """Trajectories in a seeded random order until their trained tokens reach ``budget``."""
    order = list(range(len(used)))
    random.Random(f"target-tokens:{seed}").shuffle(order)
    taken: list[tuple[str, list[Call]]] = []
    total = 0
    for i in order:
        if total >= budget:
            break
        taken.append(used[i])
        total += _target_tokens(used[i][1])
    return taken, total


def _copy_calls(calls: Sequence[Call], rid: str) -> list[Call]:
    """``calls`` as another rollout's (call ids and session id renamed)."""
    return [dataclasses.replace(c, call_id=f"{rid}#{c.seq}", session_id=rid) for c in calls]


def _batch_tree(used: Sequence[tuple[str, list[Call]]], batch: Sequence[int]) -> PackedTree:
    """One packed tree of the trajectories ``batch`` indexes (one that appears twice — a
    batch across an epoch boundary — is a second rollout of its own)."""
    from clawrl.rl_core.sft import pack_sft_calls

    seen: dict[int, int] = {}
    rollouts: list[tuple[str, list[Call]]] = []
    for i in batch:
        rid, calls = used[i]
        n = seen[i] = seen.get(i, 0) + 1
        rollouts.append(
            (rid, calls) if n == 1 else (f"{rid}~{n}", _copy_calls(calls, f"{rid}~{n}"))
        )
    return pack_sft_calls(rollouts)


# ------------------------------------------------------------------------------- model


def _export_model(trainer: Any, source: Path, dest: Path) -> list[str]:
    """``trainer.export_hf(dest)``, then the tokenizer files, chat template and generation
    config copied from ``source`` (those present); returns the copied names.

    Raises:
        ModelKitError: the exported directory fails ``clawrl.proxy.check_model_dir``.
    """
    from clawrl.proxy import check_model_dir

    trainer.export_hf(dest)
    copied = []
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, dest / name)
            copied.append(name)
    check_model_dir(dest)
    return copied


# ------------------------------------------------------------------------------- main


class _Progress:
    """A rich progress bar over the steps, or plain lines."""

    def __init__(self, total: int, plain: bool) -> None:
        from rich.console import Console

        self.plain = plain
        self.console = Console(highlight=False)
        self.progress: Any = None
        self.total = total

    def __enter__(self) -> _Progress:
        if not self.plain:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=self.console,
            )
            self.progress.__enter__()
            self.bar = self.progress.add_task("sft", total=self.total)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.__exit__(*exc)

    def step(self, row: Mapping[str, Any]) -> None:
        text = (
            f"sft step {row['step']}/{self.total} loss {row['loss']:.4f} "
            f"({row['tree_tokens']} tree / {row['flat_tokens']} flat tokens, "
            f"{row['seconds']:.1f} s)"
        )
        if self.progress is None:
            print(text, flush=True)
        else:
            self.progress.update(
                self.bar, completed=row["step"], description=f"sft loss {row['loss']:.4f}"
            )


def _say(line: str) -> None:
    print(f"sft: {line}", file=sys.stderr, flush=True)


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    """The ``sft`` command; returns the exit status: 0 done, 2 bad input (configuration,
    unreadable or malformed trajectory file, unknown model, no usable trajectory), 1 the
    training itself failed with an rl-core error."""
    args = _parser().parse_args(argv)
    try:
        cfg = _resolve_config(args)
    except ConfigError as exc:
        _say(f"config error: {exc}")
        return 2
    t0 = time.time()
    from clawrl.proxy import ChatRenderer, ModelKitError, resolve_model

    try:
        model_dir = resolve_model(cfg.model)
        renderer = ChatRenderer.from_model_dir(model_dir)
        model_cfg = json.loads((model_dir / "config.json").read_text())
    except (ModelKitError, OSError, ValueError) as exc:
        _say(f"error: model {cfg.model!r}: {exc}")
        return 2
    max_positions = model_cfg.get("max_position_embeddings")
    how = (
        "the template's tool support" if renderer.template_has_tools else "the injected tool prompt"
    )
    style = cfg.call_style
    if style == "auto":
        style = "fenced" if renderer.family == "qwen2" else "tags"
    _say(f"model {cfg.model}: {model_dir} (family {renderer.family}, {how}; tool calls {style})")
    try:
        data = _load_trajectories(
            cfg,
            proxy_render(renderer, style),
            max_positions if isinstance(max_positions, int) else None,
            _say,
        )
    except (SFTDataError, ConfigError) as exc:
        _say(f"error: {exc}")
        return 2
    n = len(data.used)
    _say(
        f"{data.read} trajectories read: {data.dropped_by_where} dropped by --where, "
        f"{len(data.skipped)} skipped, {n} used ({data.target_tokens} assistant tokens)"
    )
    if not n:
        _say("error: no trajectory left to train on")
        return 2
    out = Path(cfg.out)
    batch_size = min(cfg.batch_size, n)
    steps = cfg.steps if cfg.steps is not None else cfg.epochs * math.ceil(n / batch_size)
    try:
        out.mkdir(parents=True, exist_ok=True)
        _write_json(out / "config.json", dataclasses.asdict(cfg))  # reusable as --config
    except OSError as exc:
        _say(f"error: results directory {out}: {exc}")
        return 2
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # transformers' load / save bars: the step bar is ours
    try:
        losses, trainer = _train(cfg, model_dir, data, steps, batch_size, out)
        copied = _export_model(trainer, model_dir, out / "model")
    except (RLCoreError, ModelKitError) as exc:
        _say(f"error: {exc}")
        return 1
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    summary = {
        "trajectories": {
            "read": data.read,
            "dropped_by_where": data.dropped_by_where,
            "kept_by_where": data.read - data.dropped_by_where,
            "skipped": len(data.skipped),
            "used": n,
            "target_tokens": data.target_tokens,
        },
        "skipped": data.skipped,
        "steps": steps,
        "batch_size": batch_size,
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "wall_s": round(time.time() - t0, 3),
        "model_dir": str(model_dir),
        "out_model": str(out / "model"),
        "copied_from_model_dir": copied,
        "family": renderer.family,
        "call_style": style,
        "precision": trainer.precision,
        "template_has_tools": renderer.template_has_tools,
    }
    _write_json(out / "summary.json", summary)
    print(json.dumps(summary | {"skipped": len(data.skipped)}, indent=2))
    return 0


def _train(
    cfg: SFTRunConfig, model_dir: Path, data: _Loaded, steps: int, batch_size: int, out: Path
) -> tuple[list[float], Any]:
    """``steps`` SFT steps; one metrics line per step in ``out/metrics.jsonl``."""
    import torch
    from accelerate import Accelerator
    from clawrl.rl_core.config import LossConfig, OptimConfig, TrainerConfig
    from clawrl.rl_core.malloc import fix_malloc_thresholds
    from clawrl.rl_core.sft import epoch_batches
    from clawrl.rl_core.trainer import Trainer, seed_everything
    from transformers import AutoModelForCausalLM

    fix_malloc_thresholds()  # flat RSS over a long CPU run (see clawrl.rl_core.malloc)
    seed_everything(cfg.seed)
    policy = AutoModelForCausalLM.from_pretrained(
        model_dir, attn_implementation="sdpa", dtype=torch.float32
    )
    trainer = Trainer(
        policy,
        TrainerConfig(
            loss=LossConfig(aggregation=cfg.aggregation),  # type: ignore[arg-type]
            optim=OptimConfig(
                lr=cfg.lr,
                weight_decay=cfg.weight_decay,
                max_grad_norm=cfg.max_grad_norm,
                schedule=cfg.schedule,
                warmup_steps=cfg.warmup_steps,
                total_steps=steps,
            ),
            token_budget=cfg.token_budget or None,
            chunk_size=cfg.chunk_size,
            seed=cfg.seed,
            precision=cfg.precision,  # type: ignore[arg-type]
        ),
        accelerator=Accelerator(cpu=True, mixed_precision="no"),
    )
    batches: Iterator[list[int]] = epoch_batches(
        len(data.used), batch_size, random.Random(f"sft:{cfg.seed}")
    )
    losses: list[float] = []
    aggregation = cfg.aggregation
    with (out / "metrics.jsonl").open("w") as log, _Progress(steps, not cfg.progress) as bar:
        for step in range(1, steps + 1):
            batch = next(batches)
            t1 = time.time()
            tree = _batch_tree(data.used, batch)
            m = trainer.sft_step([tree], aggregation=aggregation)  # type: ignore[arg-type]
            flat = sum(int(c.num_tokens) for i in batch for c in data.used[i][1])
            row = {
                "step": step,
                "loss": float(m["loss"]),
                "assistant_tokens": int(tree.trainable.sum()),
                "tree_tokens": int(tree.num_tokens),
                "flat_tokens": flat,
                "trajectories": len(batch),
                "grad_norm": float(m["grad_norm"]),
                "lr": float(m["lr"]),
                "seconds": round(time.time() - t1, 4),
            }
            log.write(json.dumps(row) + "\n")
            log.flush()
            losses.append(row["loss"])
            bar.step(row)
    return losses, trainer


if __name__ == "__main__":
    raise SystemExit(main())
