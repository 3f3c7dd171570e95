"""SFT on multi-turn chat trajectories (DESIGN.md "Trajectory" format), tree-packed.

A trajectory is a JSON object with ``messages`` (OpenAI chat: system / user / assistant with
``content``, ``reasoning_content``, ``tool_calls`` / tool with ``tool_call_id``) and ``tools``
(function schemas). For every assistant message k we render, with the tokenizer's own chat
template, the prompt ``messages[:k]`` (with the generation prompt) and the conversation
``messages[:k+1]``; the tokens after the prompt are that turn's assistant tokens (trainable),
everything before is context. Each turn is one ``clawrl.prefixtree`` :class:`Call` (prompt,
completion = the assistant tokens), the trajectory is one rollout, and the calls go into one
prefix tree: where the template only appends, consecutive turns lie on one path and each
shared token is computed once; where it rewrites history (e.g. Qwen3 drops earlier
``reasoning_content``) the next turn branches off, exactly like the rollouts the proxy
records.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from clawrl.bench import iter_json_objects
from clawrl.prefixtree import Call, PackedTree, PrefixTree, PrefixTreeError
from clawrl.rl_core.errors import SFTDataError

__all__ = ["epoch_batches", "pack_sft_trajectories", "read_trajectories", "render_sft_calls"]


def epoch_batches(n: int, batch_size: int, rng: random.Random) -> Iterator[list[int]]:
    """Endless batches of ``batch_size`` indices into ``n`` examples: each epoch is a fresh
    ``rng`` permutation, and a batch that would run past an epoch's end takes the rest
    of it plus the start of the next epoch (so every example is seen equally often).

    Raises:
        ValueError: ``n`` < 1 or ``batch_size`` < 1.
    """
    if n < 1 or batch_size < 1:
        raise ValueError(f"need n >= 1 and batch_size >= 1, got {n}, {batch_size}")
    order: list[int] = []
    while True:
        while len(order) < batch_size:
            perm = list(range(n))
            rng.shuffle(perm)
            order += perm
        batch, order = order[:batch_size], order[batch_size:]
        yield batch


def read_trajectories(path: str | Path) -> list[dict[str, Any]]:
    """Read a trajectory JSONL file (one JSON object per line; blank lines skipped).

    Raises:
        SFTDataError: unreadable file, a line that is not a JSON object with ``messages``.
    """
    out = list(iter_json_objects(path, SFTDataError, torn_tail_ok=False))
    for n, obj in enumerate(out, 1):
        if not isinstance(obj.get("messages"), list):
            raise SFTDataError(f"{path}: trajectory {n} has no 'messages' list")
    return out


def _ids(rendered: Any) -> list[int]:
    # transformers 5 returns a BatchEncoding from apply_chat_template(tokenize=True)
    if isinstance(rendered, Mapping):
        rendered = rendered["input_ids"]
    return [int(t) for t in rendered]


def _render(
    tokenizer: Any, messages: Sequence[Mapping[str, Any]], tools: Any, generation_prompt: bool
) -> list[int]:
    return _ids(
        tokenizer.apply_chat_template(
            list(messages),
            tools=tools or None,
            add_generation_prompt=generation_prompt,
            tokenize=True,
        )
    )


def render_sft_calls(
    trajectory: Mapping[str, Any],
    tokenizer: Any,
    *,
    trajectory_id: str = "",
) -> list[Call]:
    """One ``clawrl.prefixtree`` :class:`Call` per assistant message: ``prompt_ids`` = the
    rendering of the messages before it with the generation prompt, ``completion_ids`` = its
    assistant tokens (the rest of the rendering of the conversation up to it, trainable),
    ``completion_logprobs`` = 0.0, ``session_id`` = ``trajectory_id``, ``call_id`` =
    ``"<trajectory_id>#<message index>"``, ``seq`` = the message index.

    Args:
        trajectory: ``{"messages": [...], "tools": [...], ...}``.
        tokenizer: any HF tokenizer with a chat template.
        trajectory_id: the trajectory's id (the calls' session id and rollout).

    Raises:
        SFTDataError: no chat template, no assistant message, a message that is not a dict
            with a role, or a template whose rendering of a turn does not extend its prompt
            (or renders an empty prompt).
    """
    if not getattr(tokenizer, "chat_template", None):
        raise SFTDataError("the tokenizer has no chat template")
    messages = trajectory.get("messages")
    if not isinstance(messages, list) or not messages:
        raise SFTDataError(f"trajectory {trajectory_id!r} has no messages")
    for k, m in enumerate(messages):
        if not isinstance(m, Mapping) or "role" not in m:
            raise SFTDataError(f"trajectory {trajectory_id!r}: message {k} has no role")
    tools = trajectory.get("tools")
    calls: list[Call] = []
    for k, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        prompt = _render(tokenizer, messages[:k], tools, True)
        full = _render(tokenizer, messages[: k + 1], tools, False)
        if not prompt or full[: len(prompt)] != prompt or len(full) == len(prompt):
            raise SFTDataError(
                f"trajectory {trajectory_id!r}: the template's rendering of assistant message "
                f"{k} does not extend its prompt"
            )
        completion = full[len(prompt) :]
        calls.append(
            Call(
                call_id=f"{trajectory_id}#{k}",
                session_id=trajectory_id,
                seq=k,
                prompt_ids=np.asarray(prompt, dtype=np.int64),
                completion_ids=np.asarray(completion, dtype=np.int64),
                completion_logprobs=np.zeros(len(completion)),
            )
        )
    if not calls:
        raise SFTDataError(f"trajectory {trajectory_id!r} has no assistant message")
    return calls


def pack_sft_trajectories(
    trajectories: Iterable[Mapping[str, Any]],
    tokenizer: Any,
) -> PackedTree:
    """Render every trajectory (:func:`render_sft_calls`) and pack all of them into one
    ``clawrl.prefixtree`` tree, each trajectory one rollout with metadata
    ``{"group_id": <id>}`` (conversations sharing a prefix — a system prompt, a first turn —
    share tokens; each keeps its own trajectories and memberships). Trajectory ids: the
    ``id`` field if present, else the position.

    Raises:
        SFTDataError: as :func:`render_sft_calls`, no trajectory at all, or two trajectories
            with the same id whose assistant message k renders differently.
    """
    tree = PrefixTree()
    for i, tr in enumerate(trajectories):
        tid = str(tr.get("id", i))
        try:
            for call in render_sft_calls(tr, tokenizer, trajectory_id=tid):
                tree.insert(call, rollout_id=tid)
        except PrefixTreeError as exc:
            raise SFTDataError(f"trajectory {tid!r}: {exc}") from exc
        tree.set_rollout_metadata(tid, {"group_id": tid})
    if not len(tree):
        raise SFTDataError("no trajectories to pack")
    return tree.pack()
