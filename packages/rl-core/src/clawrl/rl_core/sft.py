"""SFT on multi-turn chat trajectories (docs/architecture.md, "Trajectory" format), tree-packed.

A trajectory is a JSON object with ``messages`` (OpenAI chat: system / user / assistant with
``content``, ``reasoning_content``, ``tool_calls`` / tool with ``tool_call_id``) and ``tools``
(function schemas). For every assistant message k we render, with the tokenizer's own chat
template, the prompt ``messages[:k]`` (with the generation prompt) and the conversation
``messages[:k+1]``; the tokens after the prompt are that turn's assistant tokens (trainable),
everything before is context. A ``render`` callable may replace the chat template (the
proxy's family-adapted renderer, so that SFT sees the prompts the model sees at inference:
``clawrl.rl_core.sft_cli``). Each turn is one ``clawrl.prefixtree`` :class:`Call` (prompt,
completion = the assistant tokens), the trajectory is one rollout, and the calls go into one
prefix tree: where the template only appends, consecutive turns lie on one path and each
shared token is computed once; where it rewrites history (e.g. Qwen3 drops earlier
``reasoning_content``) the next turn branches off, exactly like the rollouts the proxy
records.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
from clawrl.prefixtree import Call, PackedTree, PrefixTree, PrefixTreeError
from clawrl.rl_core.errors import SFTDataError

__all__ = [
    "ChatRenderFn",
    "epoch_batches",
    "pack_sft_calls",
    "pack_sft_trajectories",
    "read_trajectories",
    "render_sft_calls",
]

#: ``render(messages, tools, add_generation_prompt) -> token ids``: renders a conversation
#: (OpenAI chat message dicts, function-tool schemas or None) to prompt token ids, in place of
#: the tokenizer's ``apply_chat_template`` (e.g. the proxy's ``ChatRenderer``, which adapts
#: the messages to the model family and injects a tool prompt where the template has none).
ChatRenderFn: TypeAlias = Callable[
    [list[dict[str, Any]], list[dict[str, Any]] | None, bool], list[int]
]


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
    # clawrl-bench comes with the ``train`` extra: imported here, so that the package
    # itself imports without it
    from clawrl.bench import iter_json_objects

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


def _render_with(
    render: ChatRenderFn,
    messages: Sequence[Mapping[str, Any]],
    tools: list[dict[str, Any]] | None,
    generation_prompt: bool,
) -> list[int]:
    return _ids(render([dict(m) for m in messages], tools, generation_prompt))


def render_sft_calls(
    trajectory: Mapping[str, Any],
    tokenizer: Any,
    *,
    trajectory_id: str = "",
    render: ChatRenderFn | None = None,
) -> list[Call]:
    """One ``clawrl.prefixtree`` :class:`Call` per assistant message: ``prompt_ids`` = the
    rendering of the messages before it with the generation prompt, ``completion_ids`` = its
    assistant tokens (the rest of the rendering of the conversation up to it, trainable),
    ``completion_logprobs`` = 0.0, ``session_id`` = ``trajectory_id``, ``call_id`` =
    ``"<trajectory_id>#<message index>"``, ``seq`` = the message index. Arrays as
    :class:`Call` stores them: ``prompt_ids`` int64 [P], ``completion_ids`` int64 [C],
    ``completion_logprobs`` float64 [C] (zeros).

    Args:
        trajectory: ``{"messages": [...], "tools": [...], ...}``.
        tokenizer: any HF tokenizer with a chat template (rendered with
            ``apply_chat_template(..., tools=...)``); may be None when ``render`` is given.
        trajectory_id: the trajectory's id (the calls' session id and rollout).
        render: ``render(messages, tools, add_generation_prompt) -> list[int]``
            (:data:`ChatRenderFn`) used instead of the tokenizer's chat template: called with
            fresh ``dict`` copies of ``messages[:k]`` / ``messages[:k+1]`` and the
            trajectory's ``tools`` (None when absent or empty). Whatever it raises propagates.

    Raises:
        SFTDataError: no chat template (without ``render``), ``tools`` that is not a list
            (with ``render``), no assistant message, a message that is not a dict with a
            role, or a rendering of a turn that does not extend its prompt (or an empty
            prompt).
    """
    if render is None and not getattr(tokenizer, "chat_template", None):
        raise SFTDataError("the tokenizer has no chat template")
    messages = trajectory.get("messages")
    if not isinstance(messages, list) or not messages:
        raise SFTDataError(f"trajectory {trajectory_id!r} has no messages")
    for k, m in enumerate(messages):
        if not isinstance(m, Mapping) or "role" not in m:
            raise SFTDataError(f"trajectory {trajectory_id!r}: message {k} has no role")
    tools = trajectory.get("tools")
    if render is not None and tools is not None and not isinstance(tools, list):
        raise SFTDataError(f"trajectory {trajectory_id!r}: 'tools' is not a list")
    calls: list[Call] = []
    for k, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        if render is None:
            prompt = _render(tokenizer, messages[:k], tools, True)
            full = _render(tokenizer, messages[: k + 1], tools, False)
        else:
            prompt = _render_with(render, messages[:k], tools or None, True)
            full = _render_with(render, messages[: k + 1], tools or None, False)
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


def pack_sft_calls(rollouts: Iterable[tuple[str, Sequence[Call]]]) -> PackedTree:
    """Pack rendered conversations (``(rollout id, calls)``, e.g. from
    :func:`render_sft_calls`) into one ``clawrl.prefixtree`` tree, each conversation one
    rollout with metadata ``{"group_id": <rollout id>}``.

    Raises:
        SFTDataError: no conversation at all, or a call id already in the tree with other
            content (the message names the rollout).
    """
    tree = PrefixTree()
    for rid, calls in rollouts:
        try:
            for call in calls:
                tree.insert(call, rollout_id=rid)
        except PrefixTreeError as exc:
            raise SFTDataError(f"trajectory {rid!r}: {exc}") from exc
        tree.set_rollout_metadata(rid, {"group_id": rid})
    if not len(tree):
        raise SFTDataError("no trajectories to pack")
    return tree.pack()


def pack_sft_trajectories(
    trajectories: Iterable[Mapping[str, Any]],
    tokenizer: Any,
    *,
    render: ChatRenderFn | None = None,
) -> PackedTree:
    """Render every trajectory (:func:`render_sft_calls`, with ``tokenizer``'s chat template
    or ``render``) and pack all of them into one ``clawrl.prefixtree`` tree
    (:func:`pack_sft_calls`), each trajectory one rollout with metadata
    ``{"group_id": <id>}`` (conversations sharing a prefix — a system prompt, a first turn —
    share tokens; each keeps its own trajectories and memberships). Trajectory ids: the
    ``id`` field if present, else the position.

    Args:
        trajectories: trajectory dicts (docs/architecture.md, "Trajectory").
        tokenizer: an HF tokenizer with a chat template; may be None when ``render`` is given.
        render: see :func:`render_sft_calls`.

    Raises:
        SFTDataError: as :func:`render_sft_calls`, no trajectory at all, or two trajectories
            with the same id whose assistant message k renders differently.
    """

    def rendered() -> Iterator[tuple[str, list[Call]]]:
        for i, tr in enumerate(trajectories):
            tid = str(tr.get("id", i))
            yield tid, render_sft_calls(tr, tokenizer, trajectory_id=tid, render=render)

    return pack_sft_calls(rendered())
