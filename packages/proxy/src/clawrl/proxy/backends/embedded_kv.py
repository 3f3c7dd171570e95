"""Engine state and KV-cache bookkeeping of the embedded backend: a generation's state, the
running batch's shared, left-padded
cache (merging new rows in, dropping finished ones) and the prefix cache of finished
sequences, reused by prompts that extend them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from clawrl.proxy.backends.base import GenerationRequest, GenerationResult, TokenDelta

log = logging.getLogger("clawrl.proxy.backends.embedded")


@dataclass(eq=False)
class _Seq:
    request: GenerationRequest
    loop: asyncio.AbstractEventLoop
    out: asyncio.Queue[TokenDelta | GenerationResult | BaseException]
    generator: torch.Generator
    received: float
    completion: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    version_start: int = -1
    n_cached: int = 0  # real tokens in the KV cache
    pending: int = -1  # sampled token not yet fed to the model
    done: bool = False
    aborted: bool = False
    finish: str = ""
    started: float = 0.0
    first_token: float = 0.0

    def emit(self, item: TokenDelta | GenerationResult | BaseException) -> None:
        with contextlib.suppress(RuntimeError):  # the event loop is gone: nobody listens
            self.loop.call_soon_threadsafe(self.out.put_nowait, item)


@dataclass
@dataclass
class _Batch:
    """Running rows and their shared, left-padded KV cache."""

    seqs: list[_Seq]
    cache: Any  # transformers DynamicCache; per layer keys/values (B, kv_heads, L, head_dim)
    valid: torch.Tensor  # (B, L) bool: column holds a real token of that row


@dataclass(eq=False)
class _PrefixEntry:
    """KV of one finished sequence: ``tokens`` (n,) and per layer (kv_heads, n, head_dim)."""

    tokens: torch.Tensor
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    last_used: float

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


def _append_in_place(
    layer: Any, key_states: torch.Tensor, value_states: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Append ``key_states`` / ``value_states`` to a cache layer by writing into a buffer
    with room to grow along the sequence axis (``layer._clawrl_buf``), instead of
    transformers' ``torch.cat`` of the whole cache (on a 19k-token harness prompt that copy
    was ~40 % of a decode step). ``layer.keys`` / ``layer.values`` become views of the
    buffer's first columns; the buffer grows by a quarter (at least 256 columns) when full
    and is rebuilt from ``keys`` / ``values`` if anything else replaced them. None: the
    layer is still empty (transformers' own update applies)."""
    keys: torch.Tensor = layer.keys
    values: torch.Tensor = layer.values
    if not layer.is_initialized or keys.dim() != 4 or keys.numel() == 0:
        return None
    cur, need = keys.shape[-2], keys.shape[-2] + key_states.shape[-2]
    buf: tuple[torch.Tensor, torch.Tensor] | None = getattr(layer, "_clawrl_buf", None)
    owned = (
        buf is not None
        and keys.data_ptr() == buf[0].data_ptr()
        and keys.shape[:2] == buf[0].shape[:2]
        and keys.stride() == buf[0].stride()
    )
    if buf is None or not owned or need > buf[0].shape[-2]:
        b, h, _, d = keys.shape
        cap = need + max(256, need // 4)
        buf = (keys.new_empty((b, h, cap, d)), values.new_empty((b, h, cap, values.shape[-1])))
        buf[0][:, :, :cur] = keys
        buf[1][:, :, :cur] = values
        layer._clawrl_buf = buf
    buf[0][:, :, cur:need] = key_states
    buf[1][:, :, cur:need] = value_states
    layer.keys, layer.values = buf[0][:, :, :need], buf[1][:, :, :need]
    return layer.keys, layer.values


_GROWING_LAYER: type | None = None


def _growing_layer() -> type:
    """transformers' ``DynamicLayer`` with :func:`_append_in_place` as its update (built on
    first use: transformers is imported lazily)."""
    global _GROWING_LAYER
    if _GROWING_LAYER is None:
        from transformers.cache_utils import DynamicLayer

        class GrowingLayer(DynamicLayer):
            def update(
                self, key_states: torch.Tensor, value_states: torch.Tensor, *a: Any, **kw: Any
            ) -> tuple[torch.Tensor, torch.Tensor]:
                done = _append_in_place(self, key_states, value_states)
                return done if done is not None else super().update(key_states, value_states)

        _GROWING_LAYER = GrowingLayer
    return _GROWING_LAYER


def growing(cache: Any) -> Any:
    """``cache`` (a transformers ``DynamicCache``) with every full-attention layer appending
    in place (:func:`_append_in_place`); returned for chaining. A no-op on layers already
    converted. The layer's class is switched (no closure on the layer: a reference cycle
    would keep each batch's buffers alive until the cyclic garbage collector ran)."""
    cls = _growing_layer()
    for layer in cache.layers:
        if type(layer).__name__ == "DynamicLayer":
            layer.__class__ = cls
    return cache


def _cache_from(keys: list[torch.Tensor], values: list[torch.Tensor]) -> Any:
    """A transformers ``DynamicCache`` holding ``keys`` / ``values`` (one per layer)."""
    from transformers import DynamicCache

    return DynamicCache(ddp_cache_data=list(zip(keys, values, strict=True)))


def _cache_tensors(cache: Any) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    keys = [layer.keys for layer in cache.layers]
    values = [layer.values for layer in cache.layers]
    return keys, values


def _left_pad(t: torch.Tensor, length: int, dim: int) -> torch.Tensor:
    missing = length - t.shape[dim]
    if missing == 0:
        return t
    shape = list(t.shape)
    shape[dim] = missing
    return torch.cat([t.new_zeros(shape), t], dim=dim)


def merge_batches(old: _Batch | None, new: _Batch) -> _Batch:
    """``old``'s rows followed by ``new``'s, both caches left-padded to a common length."""
    if old is None:
        return new
    length = max(old.valid.shape[1], new.valid.shape[1])
    (ok, ov), (nk, nv) = _cache_tensors(old.cache), _cache_tensors(new.cache)

    def join(a: list[torch.Tensor], b: list[torch.Tensor]) -> list[torch.Tensor]:
        return [
            torch.cat([_left_pad(x, length, 2), _left_pad(y, length, 2)])
            for x, y in zip(a, b, strict=True)
        ]

    return _Batch(
        seqs=old.seqs + new.seqs,
        cache=_cache_from(join(ok, nk), join(ov, nv)),
        valid=torch.cat([_left_pad(old.valid, length, 1), _left_pad(new.valid, length, 1)]),
    )


def keep_rows(batch: _Batch, keep: list[int], device: torch.device) -> _Batch:
    """The rows ``keep`` of ``batch``, without the leading columns that are padding in every
    one of them."""
    index = torch.tensor(keep, device=device)
    valid = batch.valid.index_select(0, index)
    first = int(torch.nonzero(valid.any(dim=0))[0].item())
    keys, values = _cache_tensors(batch.cache)
    return _Batch(
        seqs=[batch.seqs[i] for i in keep],
        cache=_cache_from(
            [k.index_select(0, index)[:, :, first:] for k in keys],
            [v.index_select(0, index)[:, :, first:] for v in values],
        ),
        valid=valid[:, first:],
    )


def common_prefix_len(a: list[int], b: list[int]) -> int:
    """Tokens ``a`` and ``b`` share at their start, at most ``min(len) - 1`` (the last
    prompt token is always computed: it yields the first logits)."""
    n = min(len(a), len(b)) - 1
    if n <= 0:
        return 0
    differ = torch.nonzero(torch.tensor(a[:n]) != torch.tensor(b[:n]))
    return int(differ[0].item()) if differ.numel() else n


class PrefixCache:
    """KV of finished sequences (LRU, at most ``capacity`` bytes; 0 disables), reused by
    prompts that start with one of them. Worker-thread only."""

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)
        self.entries: list[_PrefixEntry] = []

    def clear(self) -> None:
        self.entries.clear()

    def lookup(self, prompt: list[int]) -> tuple[int, _PrefixEntry | None]:
        """Longest cached prefix of ``prompt`` (at most ``len(prompt) - 1`` tokens: the last
        prompt token is always computed, it yields the first logits)."""
        if not self.entries:
            return 0, None
        ids = torch.tensor(prompt[:-1], dtype=torch.long)
        best: tuple[int, _PrefixEntry | None] = (0, None)
        for entry in self.entries:
            n = min(len(ids), entry.tokens.shape[0])
            if n <= best[0]:
                continue
            differ = torch.nonzero(ids[:n] != entry.tokens[:n])
            common = int(differ[0].item()) if differ.numel() else n
            if common > best[0]:
                best = (common, entry)
        if best[1] is not None:
            best[1].last_used = time.monotonic()
        return best

    @staticmethod
    def tensors(
        hits: list[tuple[int, _PrefixEntry | None]], big_h: int
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per layer ``(G, kv_heads, big_h, head_dim)`` K/V, each row's prefix right-aligned."""
        template = next(e for _, e in hits if e is not None)
        keys: list[torch.Tensor] = []
        values: list[torch.Tensor] = []
        for layer in range(len(template.keys)):
            ref = template.keys[layer]
            shape = (len(hits), ref.shape[0], big_h, ref.shape[2])
            k = ref.new_zeros(shape)
            v = ref.new_zeros(shape)
            for row, (h, entry) in enumerate(hits):
                if entry is not None and h:
                    k[row, :, big_h - h :] = entry.keys[layer][:, :h]
                    v[row, :, big_h - h :] = entry.values[layer][:, :h]
            keys.append(k)
            values.append(v)
        return keys, values

    def store(self, fed: list[int], row: int, batch: _Batch) -> None:
        """Keep the KV of row ``row`` of ``batch``, whose cached tokens are ``fed``."""
        if self.capacity <= 0 or len(fed) < 2:
            return
        cols = torch.nonzero(batch.valid[row])[:, 0]
        if cols.numel() != len(fed):  # pragma: no cover - bookkeeping invariant
            log.warning(
                "prefix cache: row has %d cached columns, expected %d", cols.numel(), len(fed)
            )
            return
        tokens = torch.tensor(fed, dtype=torch.long)
        n = tokens.shape[0]
        for e in self.entries:  # already kept (alone or as part of a longer sequence)
            if e.tokens.shape[0] >= n and torch.equal(e.tokens[:n], tokens):
                e.last_used = time.monotonic()
                return
        keys, values = _cache_tensors(batch.cache)
        entry = _PrefixEntry(
            tokens=tokens,
            keys=[k[row].index_select(1, cols).clone() for k in keys],
            values=[v[row].index_select(1, cols).clone() for v in values],
            last_used=time.monotonic(),
        )
        if entry.nbytes > self.capacity:
            return
        # an entry that is a prefix of the new one is redundant
        self.entries = [
            e
            for e in self.entries
            if not (
                e.tokens.shape[0] <= tokens.shape[0]
                and torch.equal(e.tokens, tokens[: e.tokens.shape[0]])
            )
        ]
        self.entries.append(entry)
        total = sum(e.nbytes for e in self.entries)
        while total > self.capacity:
            oldest = min(self.entries, key=lambda e: e.last_used)
            self.entries.remove(oldest)
            total -= oldest.nbytes


@dataclass
class _Prefill:
    """Inputs of one group prefill; the new rows' cache has ``[H prefix | W suffix]``
    columns (see ``EmbeddedBackend._admit``)."""

    tokens: torch.Tensor  # (G, W) suffix tokens, right-aligned
    positions: torch.Tensor  # (G, W) position ids, continuing after each row's prefix
    valid: torch.Tensor  # (G, H + W) bool: column holds a real token of that row
    valid_suffix: torch.Tensor  # (G, W)
    cache: Any  # the reused prefixes, right-aligned in the H prefix columns
    prefix_lens: list[int]
    suffix_lens: list[int]
    big_h: int
    width: int

    def mask(self, start: int, end: int) -> torch.Tensor:
        """``(G, 1, Q, K)`` bool attention mask of suffix columns ``[start, end)``."""
        big_h = self.big_h
        all_cols = torch.arange(big_h + self.width, device=self.valid.device)
        q = all_cols[big_h + start : big_h + end]  # absolute columns of the queries
        k = all_cols[: big_h + end]
        causal = k[None, :] <= q[:, None]  # (Q, K)
        mask = self.valid[:, None, : big_h + end] & causal[None]  # (G, Q, K)
        # padded query rows attend to themselves only (no empty attention row)
        selfonly = (~self.valid_suffix[:, start:end])[:, :, None] & (
            k[None, None, :] == q[None, :, None]
        )
        return (mask | selfonly)[:, None]  # (G, 1, Q, K)


def plan_prefill(
    prompts: list[list[int]],
    hits: list[tuple[int, _PrefixEntry | None]],
    device: torch.device,
) -> _Prefill:
    """Lay out ``prompts`` (with their prefix-cache ``hits``) for one padded prefill."""
    dev = device
    prefix_lens = [h[0] for h in hits]
    big_h = max(prefix_lens)
    lengths = [len(p) for p in prompts]
    suffix_lens = [n - h for n, h in zip(lengths, prefix_lens, strict=True)]
    width = max(suffix_lens)
    g = len(prompts)
    tokens = torch.zeros((g, width), dtype=torch.long, device=dev)
    for row, prompt in enumerate(prompts):
        suffix = prompt[prefix_lens[row] :]
        tokens[row, width - suffix_lens[row] :] = torch.tensor(suffix, device=dev)
    pad = torch.tensor([width - n for n in suffix_lens], device=dev)
    offset = torch.tensor(prefix_lens, device=dev)
    cols = torch.arange(width, device=dev)
    valid_suffix = cols[None, :] >= pad[:, None]  # (G, W)
    positions = (cols[None, :] - pad[:, None]).clamp(min=0) + offset[:, None]
    if big_h:
        prefix_cols = torch.arange(big_h, device=dev)
        valid_prefix = prefix_cols[None, :] >= (big_h - offset)[:, None]  # (G, H)
        keys, values = PrefixCache.tensors(hits, big_h)
        cache = _cache_from(keys, values)
    else:
        valid_prefix = torch.zeros((g, 0), dtype=torch.bool, device=dev)
        cache = _cache_from([], [])
    return _Prefill(
        tokens=tokens,
        positions=positions,
        valid=torch.cat([valid_prefix, valid_suffix], dim=1),  # (G, H + W)
        valid_suffix=valid_suffix,
        cache=cache,
        prefix_lens=prefix_lens,
        suffix_lens=suffix_lens,
        big_h=big_h,
        width=width,
    )
