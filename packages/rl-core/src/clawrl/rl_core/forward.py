"""Tree-packed forward of a Hugging Face causal LM: per-token logprobs, entropy, values.

One forward pass over a packed tree (DFS order, ``position_ids`` = depth, token ``i`` attends
token ``j`` iff ``j <= i < subtree_end[j]``) gives every token exactly the hidden state it has
on its own root-to-leaf path. The logprob of token ``i`` is read from the logits at its
predecessor ``parent_index[i]`` (not at ``i - 1``: in DFS order the previous token may belong
to another branch, a classic tree-packing bug).

Attention backends (``model.config._attn_implementation``):

* ``"sdpa"`` — a boolean 4-D mask, True = attend (CPU default; exact per path);
* ``"eager"`` — an additive float mask (a boolean mask is silently wrong with eager);
* ``"flex_attention"`` — a ``BlockMask`` built in O(N + (N/B)²) from ``subtree_end`` by
  :func:`clawrl.rl_core.flex.tree_block_mask` (GPU fast path; flex has no CPU backward);
* anything else (e.g. flash attention, which cannot take a tree mask) raises ConfigError.

Logprobs follow "Logprobs" (docs/architecture.md): ``log softmax(logits / T)[token]``
at the sampling temperature ``T``, always computed in at least float32: under bf16 autocast
the vocabulary projection runs in bf16 and its logits are upcast before the log-softmax.
They are computed in chunks of ``chunk_size`` targets with
activation checkpointing, so the full ``[N, vocab]`` logits never exist at once (forward or
backward).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from clawrl.rl_core.errors import ConfigError, PackingError
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

__all__ = [
    "TreeForwardOutput",
    "TreeModel",
    "chunked_token_logprobs",
    "tree_attention_mask",
    "tree_forward",
]


@dataclass
class TreeForwardOutput:
    """Per-target outputs of :func:`tree_forward` (T = number of targets).

    Attributes:
        logprobs: [T], ``log softmax(logits[parent] / T)[token]``; dtype = compute dtype
            (at least float32).
        entropy: [T] entropy (nats) of that softmax, or None if not requested.
        values: [T] value of the state before each target token (value head applied to the
            hidden state at ``parent_index``), or None without a value head.
    """

    logprobs: Tensor
    entropy: Tensor | None
    values: Tensor | None


def tree_attention_mask(subtree_end: Tensor) -> Tensor:
    """Dense tree-attention mask from the O(N) description.

    ``mask[0, 0, i, j] = j <= i < subtree_end[j]`` (True = attend): each token attends
    exactly its ancestors and itself.

    Args:
        subtree_end: int64 [N].

    Returns:
        bool [1, 1, N, N] on ``subtree_end.device``. Memory O(N²): use the flex path
        for long trees.
    """
    idx = torch.arange(subtree_end.shape[0], device=subtree_end.device)
    mask = (idx[None, :] <= idx[:, None]) & (idx[:, None] < subtree_end[None, :])
    return mask[None, None]


def _upcast_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


def _logprob_entropy_chunk(
    hidden: Tensor,
    targets: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    temperature: float,
    want_entropy: bool,
) -> tuple[Tensor, Tensor]:
    logits = nn.functional.linear(hidden, weight, bias)
    logits = logits.to(_upcast_dtype(logits.dtype)) / temperature
    lse = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, targets[:, None]).squeeze(-1) - lse
    if want_entropy:
        probs = torch.softmax(logits, dim=-1)
        ent = lse - (probs * logits).sum(-1)
    else:
        ent = torch.zeros_like(logp)
    return logp, ent


def chunked_token_logprobs(
    hidden: Tensor,
    target_ids: Tensor,
    lm_head: nn.Module,
    *,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    compute_entropy: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """``log softmax(lm_head(hidden) / T)[target]`` and entropy, ``chunk_size`` rows at a time.

    With gradients enabled each chunk is wrapped in activation checkpointing, so only one
    chunk's ``[chunk_size, vocab]`` logits are alive at any time, in backward too.

    Args:
        hidden: [T, H] hidden states at the predecessor of each target token.
        target_ids: int64 [T].
        lm_head: a ``nn.Linear`` (the model's output embeddings).
        temperature: T > 0, the sampling temperature the rollout logprobs were recorded at.
        chunk_size: rows per chunk (≥ 1).
        compute_entropy: also return the entropy (nats) of each softmax.

    Returns:
        (logprobs [T], entropy [T] or None), dtype promote(hidden.dtype, float32).

    Raises:
        ConfigError: temperature ≤ 0, chunk_size < 1, or an lm_head that is not nn.Linear.
    """
    if temperature <= 0:
        raise ConfigError(f"temperature must be > 0, got {temperature}")
    if chunk_size < 1:
        raise ConfigError(f"chunk_size must be >= 1, got {chunk_size}")
    if not isinstance(lm_head, nn.Linear):
        raise ConfigError(f"lm_head must be nn.Linear, got {type(lm_head).__name__}")
    weight, bias = lm_head.weight, lm_head.bias
    use_ckpt = torch.is_grad_enabled()
    lps, ents = [], []
    for s in range(0, hidden.shape[0], chunk_size):
        h, t = hidden[s : s + chunk_size], target_ids[s : s + chunk_size]
        fn: Callable[..., tuple[Tensor, Tensor]] = _logprob_entropy_chunk
        if use_ckpt:
            lp, en = checkpoint(
                fn, h, t, weight, bias, temperature, compute_entropy, use_reentrant=False
            )
        else:
            lp, en = fn(h, t, weight, bias, temperature, compute_entropy)
        lps.append(lp)
        ents.append(en)
    dtype = _upcast_dtype(hidden.dtype)
    logp = torch.cat(lps) if lps else hidden.new_zeros(0, dtype=dtype)
    ent = (
        (torch.cat(ents) if ents else hidden.new_zeros(0, dtype=dtype)) if compute_entropy else None
    )
    return logp, ent


def run_outside_autocast(head: nn.Module, hidden: Tensor) -> Tensor:
    """``head(hidden)`` in the head's own parameter dtype, with autocast off: a value head
    keeps its float32 precision under bf16 mixed precision (its cost is negligible; without
    fp32 master weights the input is only cast to the head's dtype). Outside autocast, with
    ``hidden`` already in that dtype, this is exactly ``head(hidden)``."""
    param = next(head.parameters(), None)
    if param is not None and hidden.dtype != param.dtype:
        hidden = hidden.to(param.dtype)
    with torch.autocast(hidden.device.type, enabled=False):
        return head(hidden)


def _attention_mask_for(model: nn.Module, subtree_end: Tensor, dtype: torch.dtype) -> object:
    impl = getattr(model.config, "_attn_implementation", None) or "eager"
    if impl == "sdpa":
        return tree_attention_mask(subtree_end)
    if impl == "eager":
        allowed = tree_attention_mask(subtree_end)
        zero = torch.zeros((), dtype=dtype, device=subtree_end.device)
        neg = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=subtree_end.device)
        return torch.where(allowed, zero, neg)
    if impl == "flex_attention":
        from clawrl.rl_core.flex import tree_block_mask

        return tree_block_mask(subtree_end)
    raise ConfigError(
        f"attention implementation {impl!r} cannot take a tree mask; load the model with "
        "attn_implementation='sdpa' (CPU), 'flex_attention' (GPU) or 'eager'"
    )


def _sliding_window(model: nn.Module) -> int | None:
    """The window of the model's ``sliding_attention`` layers (Qwen2 / Qwen3 configs with
    ``use_sliding_window``), or None when every layer attends fully (Llama, Qwen2.5)."""
    cfg = model.config
    if "sliding_attention" not in (getattr(cfg, "layer_types", None) or ()):
        return None
    window = getattr(cfg, "sliding_window", None)
    return int(window) if window else None


def _tree_masks(
    model: nn.Module, subtree_end: Tensor, position_ids: Tensor, dtype: torch.dtype
) -> object:
    """The attention mask argument: one tree mask, or, for a model with sliding-window layers,
    ``{"full_attention": tree, "sliding_attention": tree and depth(i) - depth(j) < window}``
    (a single 4-D mask would be applied to the sliding layers too, silently unwindowed)."""
    window = _sliding_window(model)
    impl = getattr(model.config, "_attn_implementation", None) or "eager"
    if window is None or impl not in ("sdpa", "eager"):
        if window is not None:
            raise ConfigError(f"sliding-window attention is supported with sdpa/eager, not {impl}")
        return _attention_mask_for(model, subtree_end, dtype)
    allowed = tree_attention_mask(subtree_end)
    near = (position_ids[:, None] - position_ids[None, :]) < window
    masks = {"full_attention": allowed, "sliding_attention": allowed & near[None, None]}
    if impl == "sdpa":
        return masks
    zero = torch.zeros((), dtype=dtype, device=subtree_end.device)
    neg = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=subtree_end.device)
    return {k: torch.where(m, zero, neg) for k, m in masks.items()}


def _decoder(model: nn.Module) -> nn.Module:
    get = getattr(model, "get_decoder", None)
    dec = get() if callable(get) else None
    if dec is None:
        dec = getattr(model, "base_model", None)
    if not isinstance(dec, nn.Module) or dec is model:
        raise ConfigError(f"cannot find the decoder body of {type(model).__name__}")
    return dec


def tree_forward(
    model: nn.Module,
    input_ids: Tensor,
    position_ids: Tensor,
    parent_index: Tensor,
    subtree_end: Tensor,
    targets: Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    compute_entropy: bool = False,
    value_head: nn.Module | None = None,
    policy_grad: bool = True,
) -> TreeForwardOutput:
    """One forward of a HF causal LM over a packed tree; outputs at ``targets``.

    Args:
        model: a transformers ``*ForCausalLM`` (decoder body via ``get_decoder()``, output
            embeddings via ``get_output_embeddings()``).
        input_ids, position_ids, parent_index, subtree_end: int64 [N] (one tree or forest,
            local indices), on the model's device.
        targets: int64 [T], indices of the tokens whose logprob is wanted; each must have a
            predecessor (``parent_index >= 0``).
        temperature: sampling temperature T (logits are divided by it).
        chunk_size: vocabulary-projection rows per chunk.
        compute_entropy: also return entropies.
        value_head: optional module mapping hidden [T, H] → [T, 1] or [T] (PPO value head).
        policy_grad: False runs the policy (decoder and vocabulary head) without autograd,
            so nothing downstream — the value head included, which then reads detached hidden
            states — can give the policy a gradient (PPO value warm-up); the value head's
            own parameters still get theirs.

    Returns:
        :class:`TreeForwardOutput` with [T] tensors.

    Raises:
        PackingError: a target is a root token or arrays have mismatched shapes.
        ConfigError: the model's attention implementation cannot take a tree mask.

    Families: Llama (tied or untied embeddings), Qwen2 and Qwen3 run unchanged; a config with
    sliding-window layers (``layer_types`` with ``sliding_attention``) gets a windowed tree
    mask for those layers (window counted in depth, i.e. along each token's own path).
    """
    n = input_ids.shape[0]
    for name, t in (
        ("position_ids", position_ids),
        ("parent_index", parent_index),
        ("subtree_end", subtree_end),
    ):
        if t.shape != (n,):
            raise PackingError(f"{name} has shape {tuple(t.shape)}, expected ({n},)")
    src = parent_index[targets]
    if targets.numel() and bool((src < 0).any()):
        raise PackingError("a target token has no predecessor (parent_index = -1)")
    dec = _decoder(model)
    lm_head = model.get_output_embeddings()  # type: ignore[operator]
    dtype = lm_head.weight.dtype
    mask = _tree_masks(model, subtree_end, position_ids, dtype)
    with torch.set_grad_enabled(torch.is_grad_enabled() and policy_grad):
        out = dec(
            input_ids=input_ids[None],
            position_ids=position_ids[None],
            attention_mask=mask,
            use_cache=False,
        )
        hidden = out.last_hidden_state[0]
        h_src = hidden[src]
        logp, ent = chunked_token_logprobs(
            h_src,
            input_ids[targets],
            lm_head,
            temperature=temperature,
            chunk_size=chunk_size,
            compute_entropy=compute_entropy,
        )
    values = None
    if value_head is not None:
        v = run_outside_autocast(value_head, h_src)
        values = v.reshape(v.shape[0]).to(_upcast_dtype(v.dtype))
    return TreeForwardOutput(logprobs=logp, entropy=ent, values=values)


class TreeModel(nn.Module):
    """A policy (HF causal LM) and an optional value head as one module whose ``forward`` is
    :func:`tree_forward` — what the trainer hands to ``accelerator.prepare`` so DDP/FSDP
    wrappers see every parameter and every call.

    ``forward(input_ids, position_ids, parent_index, subtree_end, targets, *, temperature,
    chunk_size, compute_entropy, compute_values, policy_grad)`` → :class:`TreeForwardOutput`
    (``policy_grad``: see :func:`tree_forward`).
    """

    def __init__(self, policy: nn.Module, value_head: nn.Module | None = None) -> None:
        super().__init__()
        self.policy = policy
        self.value_head = value_head

    def forward(
        self,
        input_ids: Tensor,
        position_ids: Tensor,
        parent_index: Tensor,
        subtree_end: Tensor,
        targets: Tensor,
        *,
        temperature: float = 1.0,
        chunk_size: int = 1024,
        compute_entropy: bool = False,
        compute_values: bool = True,
        policy_grad: bool = True,
    ) -> TreeForwardOutput:
        return tree_forward(
            self.policy,
            input_ids,
            position_ids,
            parent_index,
            subtree_end,
            targets,
            temperature=temperature,
            chunk_size=chunk_size,
            compute_entropy=compute_entropy,
            value_head=self.value_head if compute_values else None,
            policy_grad=policy_grad,
        )
