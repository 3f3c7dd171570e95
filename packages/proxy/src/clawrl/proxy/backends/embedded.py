"""EmbeddedBackend: a transformers model served in-process (CPU or GPU).

One worker thread owns the model and runs a step-wise *continuous batching* loop, so the
asyncio event loop (the HTTP server) never waits on a forward pass:

1. admit waiting requests (up to ``max_batch_size`` running; none while paused): their
   prompts are left-padded to a common length and prefilled together, one chunk of
   ``prefill_chunk`` tokens per step (the running rows decode between two chunks, so a long
   prompt does not stall them), into a KV cache; the last position's logits give each
   request's first token;
2. merge the new rows into the running batch's KV cache (left-padding the shorter side);
3. one decode step for every running row: feed each row's last token, at its own position
   id, with a boolean 4-D attention mask that hides every padded cache column;
4. sample each row's next token with its own sampling parameters and random generator,
   stream it, and retire rows that stopped (stop token, ``max_tokens``, abort).

Padding never changes a result: padded key/value columns are masked out, position ids
count only real tokens, and padded query rows attend to themselves only (so no attention row
is empty). The recorded logprob is the one of the distribution sampled from:
``log_softmax(logits / T)[token]`` at temperature ``T`` (ClawRL's definition, docs/architecture.md);
with ``top_p < 1`` or ``top_k > 0`` it is the logprob under the *truncated and renormalised*
distribution (such records are evaluation samples, not trained on); at ``T == 0`` the token
is the argmax and its logprob is the one of the ``T = 1`` distribution.

Weights change between two steps (``update_weights`` from an HF directory,
``load_state_dict`` in-process); requests still generating continue with the new weights
and report ``policy_version_end`` != ``policy_version``.

Request checks live in ``embedded_requests``, sampling in ``embedded_sampling``, the batch and prefix KV caches in ``embedded_kv``
and weights I/O in ``embedded_weights`` (their public names are re-exported here).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import queue
import random
import threading
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from clawrl.proxy.backends.base import (
    BackendError,
    GenerationRequest,
    GenerationResult,
    InferenceBackend,
    TokenDelta,
)
from clawrl.proxy.backends.embedded_kv import (
    PrefixCache,
    _Batch,
    _Seq,
    common_prefix_len,
    growing,
    keep_rows,
    merge_batches,
    plan_prefill,
)
from clawrl.proxy.backends.embedded_requests import (
    EmbeddedRequestError,
    PromptTooLongError,
    check_request,
)
from clawrl.proxy.backends.embedded_sampling import _truncate, sample_token  # noqa: F401
from clawrl.proxy.backends.embedded_weights import (
    WeightLoadError,
    _load_into,
    _read_safetensors_dir,
    load_model,
)

__all__ = [
    "DTYPES",
    "EmbeddedBackend",
    "EmbeddedRequestError",
    "PromptTooLongError",
    "WeightLoadError",
    "bf16_is_native",
    "resolve_dtype",
    "sample_token",
]

log = logging.getLogger(__name__)

#: serving dtypes by name: ``fp32`` (exact logprobs) and ``bf16`` (bfloat16 weights, KV and
#: activations; logits upcast to float32 before sampling)
DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16}
_DTYPE_ALIASES = {"float32": "fp32", "bfloat16": "bf16"}

#: shortest prefix (tokens) shared by prompts admitted together that is prefilled once
MIN_SHARED_PREFIX = 16


def bf16_is_native(device: torch.device | str = "cpu") -> bool:
    """Whether bf16 matmuls run on native kernels on ``device``: a CUDA device that supports
    bf16, or a CPU with AVX-512 BF16 or AMX (oneDNN's bf16 kernels). Elsewhere (an AVX2-only
    CPU: most laptops and older servers) torch falls back to reference kernels: 1.1 GFLOP/s
    against 183 in fp32 on a 2-core AVX2 Zen 3 (``tools/perf/roofline.py``)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    if dev.type != "cpu":
        return True
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def resolve_dtype(dtype: torch.dtype | str, device: torch.device | str = "cpu") -> torch.dtype:
    """``torch.float32`` / ``torch.bfloat16`` or their names (``fp32``, ``bf16``,
    ``float32``, ``bfloat16``), or ``auto``: bf16 where :func:`bf16_is_native` on
    ``device``, else fp32. An explicit bf16 on a CPU without native bf16 kernels is kept,
    with a warning (it runs over 100 times slower than fp32 there).

    Raises:
        ValueError: another dtype (one line, naming the choices).
    """
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise ValueError(f"dtype must be fp32, bf16 or auto, got {dtype}")
        out = dtype
    else:
        name = _DTYPE_ALIASES.get(str(dtype), str(dtype))
        if name == "auto":
            return torch.bfloat16 if bf16_is_native(device) else torch.float32
        if name not in DTYPES:
            raise ValueError(f"dtype must be fp32, bf16 or auto, got {dtype!r}")
        out = DTYPES[name]
    if out == torch.bfloat16 and not bf16_is_native(device):
        log.warning(
            "bf16 on %s without native bf16 kernels (no AVX-512 BF16 or AMX): matmuls run "
            "over 100 times slower than fp32 here; use dtype 'auto' or 'fp32'",
            device,
        )
    return out


#: models below this many (estimated) parameters decode on one thread: their operations are
#: too small to split, and threads waiting on each other at every operation cost more than
#: they save (measured on 2 shared cores: a 2-layer test model decoded 15x slower on two
#: threads, Qwen2.5-0.5B 2.3x faster in bf16 at batch 8)
MIN_PARAMS_FOR_THREADS = 50_000_000


def machine_threads(params: int | None = None) -> int:
    """Threads that follow the machine: the cores in this process's affinity mask; one for a
    model of fewer than ``MIN_PARAMS_FOR_THREADS`` parameters."""
    if params is not None and params < MIN_PARAMS_FOR_THREADS:
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def estimate_params(text_cfg: Mapping[str, Any]) -> int:
    """A decoder's parameter count from its config (12 h^2 per layer + embeddings)."""
    hidden = int(text_cfg.get("hidden_size", 0))
    layers = int(text_cfg.get("num_hidden_layers", 0))
    return 12 * layers * hidden * hidden + int(text_cfg.get("vocab_size", 0)) * hidden


@dataclass(eq=False)
class _Pending:
    """A group being prefilled: its plan and the next suffix column to compute."""

    seqs: list[_Seq]
    plan: Any
    start: int = 0


class EmbeddedBackend(InferenceBackend):
    """transformers in-process: KV cache, continuous batching, exact logprobs.

    Args:
        model_dir: HF model directory (e.g. ``build_default_model()``).
        device: torch device (``"cpu"``, ``"cuda"``, ...).
        dtype: weights, KV cache and activations: ``"fp32"`` / ``torch.float32`` (exact
            logprobs) or ``"bf16"`` / ``torch.bfloat16`` (AMX / tensor-core matmuls, half the
            memory traffic and KV bytes), or ``"auto"``: bf16 where the device has native
            bf16 kernels (:func:`bf16_is_native`), else fp32. Logits are upcast to float32
            before sampling, and the recorded logprob is the one of the distribution sampled
            from, in either.
        num_threads: ``torch.set_num_threads`` (process-wide), set when the worker starts:
            ``"auto"`` (default) follows the machine (``machine_threads``: the cores of this
            process's affinity mask; one for a model under ``MIN_PARAMS_FOR_THREADS``
            parameters), an int sets it, ``None`` leaves torch's setting alone.
        max_batch_size: running generations at most; more wait in a queue.
        max_context: prompt + completion limit in tokens (default and upper bound: the
            model's ``max_position_embeddings``).
        prefill_chunk: prompt tokens per prefill forward (bounds attention memory).
        max_prefill_tokens: padded prompt tokens (rows x longest prompt) prefilled together
            in one step; a longer single prompt is still admitted alone.
        prefix_cache_bytes: bytes of KV kept for reuse (LRU), shared by every session: each
            admitted prompt and each finished generation is kept; a prompt that starts with
            a kept sequence (the next call of a conversation, another session with the same
            system prompt and tools) prefills only the rest, and prompts admitted together
            that share a prefix prefill it once. 0 disables. Cleared on weight changes (the
            KV belongs to one policy version).
        attn_implementation: transformers attention (``"sdpa"`` or ``"eager"``).
        kv_in_place: decoding appends each token's keys and values into spare room of the
            running batch's cache (default); False: transformers' own append, which copies
            the whole cache every step (kept for comparison: ``tools/perf/bench_serving.py
            --contexts``). Same results either way.
        seed: seeds the generators of requests that give no ``sampling.seed``.
        policy_version: version of the initial weights.
    """

    name = "embedded"

    def __init__(
        self,
        model_dir: str | Path,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | str = torch.float32,
        num_threads: int | str | None = "auto",
        max_batch_size: int = 8,
        max_context: int | None = None,
        prefill_chunk: int = 1024,
        max_prefill_tokens: int = 8192,
        prefix_cache_bytes: int = 256 * 2**20,
        attn_implementation: str = "sdpa",
        kv_in_place: bool = True,
        seed: int | None = None,
        policy_version: int = 0,
    ) -> None:
        self.model_dir = Path(model_dir)
        if not (self.model_dir / "config.json").is_file():
            raise BackendError(f"not an HF model directory (no config.json): {self.model_dir}")
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if prefill_chunk < 1:
            raise ValueError(f"prefill_chunk must be >= 1, got {prefill_chunk}")
        if prefix_cache_bytes < 0:
            raise ValueError(f"prefix_cache_bytes must be >= 0, got {prefix_cache_bytes}")
        cfg = json.loads((self.model_dir / "config.json").read_text())
        text_cfg = cfg.get("text_config", cfg)
        self._vocab_size = int(text_cfg["vocab_size"])
        if num_threads == "auto":
            num_threads = machine_threads(estimate_params(text_cfg))
        if num_threads is not None and (isinstance(num_threads, (str, bool)) or num_threads < 1):
            raise ValueError(f"num_threads must be >= 1, 'auto' or None, got {num_threads!r}")
        positions = int(text_cfg.get("max_position_embeddings", 0)) or 32768
        if max_context is not None and not 1 < max_context <= positions:
            raise ValueError(f"max_context must be in (1, {positions}], got {max_context}")
        self._max_context = int(max_context) if max_context is not None else positions
        self.device = torch.device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self.num_threads: int | None = num_threads
        self.max_batch_size = int(max_batch_size)
        self.prefill_chunk = int(prefill_chunk)
        self.max_prefill_tokens = int(max_prefill_tokens)
        self.attn_implementation = attn_implementation
        self.kv_in_place = bool(kv_in_place)
        self._rng = random.Random(seed)
        self._version = int(policy_version)

        self._model: Any = None
        self._cache_kwarg = "cache"
        self._start_lock = asyncio.Lock()
        self._commands: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._paused = False
        self._inflight: dict[str, _Seq] = {}  # every submitted, unfinished request
        self._waiting: list[_Seq] = []  # worker-thread only
        self._batch: _Batch | None = None  # worker-thread only
        self._pending: _Pending | None = None  # a group being prefilled, one chunk a step
        self._lock = threading.Lock()  # guards _inflight
        self._prefix = PrefixCache(prefix_cache_bytes)  # worker-thread only
        self.stats = {
            "steps": 0,
            "prefills": 0,
            "max_running": 0,
            "tokens": 0,
            "prefill_tokens": 0,  # prompt tokens computed (shared prefills included)
            "prefix_hit_tokens": 0,  # prompt tokens whose KV came from the prefix cache
            "prefix_lookups": 0,  # admitted prompts
            "prefix_hits": 0,  # admitted prompts that reused cached KV
            "shared_prefills": 0,  # prefixes shared by prompts admitted together, run once
            "shared_prefill_tokens": 0,
        }

    @property
    def prefix_cache_bytes(self) -> int:
        """Bytes of KV the prefix cache keeps (0: disabled)."""
        return self._prefix.capacity

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def model(self) -> Any:
        """The loaded ``PreTrainedModel`` (after ``start()``). Do not run it concurrently
        with the backend; change weights with ``load_state_dict``."""
        return self._model

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Load the model (in a thread) and start the worker. Idempotent.

        Raises:
            BackendError: the model cannot be loaded.
        """
        async with self._start_lock:
            if self._thread is not None:
                return
            ready: concurrent.futures.Future[None] = concurrent.futures.Future()
            self._stopping = False
            self._thread = threading.Thread(
                target=self._worker, args=(ready,), name="clawrl-embedded-backend", daemon=True
            )
            self._thread.start()
            try:
                await asyncio.wrap_future(ready)
            except BaseException:
                self._thread.join(timeout=5)
                self._thread = None
                raise

    async def close(self) -> None:
        """Stop the worker; generations still running end with finish_reason "aborted"."""
        thread = self._thread
        if thread is None:
            return
        self._stopping = True
        self._commands.put(("wake", None))
        await asyncio.to_thread(thread.join)
        self._thread = None

    async def health(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    async def pause(self) -> None:
        """Stop admitting new generations; running ones continue to their end."""
        self._paused = True

    async def resume(self) -> None:
        """Admit waiting generations again."""
        self._paused = False
        self._commands.put(("wake", None))

    # -- generation --------------------------------------------------------------------------

    def validate(self, request: GenerationRequest) -> None:
        """Check a request before it is queued.

        Raises:
            EmbeddedRequestError: empty prompt, an id outside ``[0, vocab_size)``, bad
                sampling parameters.
            PromptTooLongError: ``len(prompt_ids) + max_tokens > max_context``.
        """
        check_request(request, self.vocab_size, self.max_context)

    async def generate(
        self, request: GenerationRequest
    ) -> AsyncIterator[TokenDelta | GenerationResult]:
        """Stream ``TokenDelta`` (one token each), then one ``GenerationResult``.

        Closing the iterator early (client disconnect) aborts the generation.

        Raises:
            EmbeddedRequestError: invalid request (see ``validate``), raised before any item.
            BackendError: the backend is closed or its worker died.
        """
        self.validate(request)
        await self.start()
        if self._stopping:
            raise BackendError("the embedded backend is closed")
        gen = torch.Generator(device="cpu")
        seed = request.sampling.seed
        gen.manual_seed(seed if seed is not None else self._rng.getrandbits(63))
        seq = _Seq(
            request=request,
            loop=asyncio.get_running_loop(),
            out=asyncio.Queue(),
            generator=gen,
            received=time.time(),
        )
        with self._lock:
            if request.request_id in self._inflight:
                raise EmbeddedRequestError(f"request id {request.request_id!r} is already running")
            self._inflight[request.request_id] = seq
        self._commands.put(("submit", seq))
        finished = False
        try:
            while True:
                item = await seq.out.get()
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                if isinstance(item, GenerationResult):
                    finished = True
                yield item
                if finished:
                    return
        finally:
            if not finished:
                self._commands.put(("abort", request.request_id))

    async def abort(self, request_id: str) -> None:
        """Abort a waiting or running generation (no-op for an unknown id)."""
        self._commands.put(("abort", request_id))

    # -- weights -----------------------------------------------------------------------------

    async def update_weights(self, path: str, version: int) -> None:
        """Load weights from an HF checkpoint directory (``*.safetensors``) between two
        decoding steps; ``policy_version`` becomes ``version``.

        Raises:
            WeightLoadError: no safetensors files, unknown/missing keys or shape mismatch
                (the previous weights stay).
        """
        state = await asyncio.to_thread(_read_safetensors_dir, Path(path))
        await self.load_state_dict(state, version)

    async def load_state_dict(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Copy in-process weights (e.g. the trainer's ``model.state_dict()``) into the model
        between two decoding steps; ``policy_version`` becomes ``version``.

        Keys are the HF model's (``model.layers.0...``, ``lm_head.weight``); with tied
        embeddings ``lm_head.weight`` may be absent. Tensors are copied (cast to the
        backend's dtype and device), so the caller may keep changing its own afterwards.

        Raises:
            WeightLoadError: unknown or missing keys, or a shape mismatch.
        """
        await self.start()
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._commands.put(("weights", (dict(state_dict), int(version), done)))
        await asyncio.wrap_future(done)

    # -- worker thread -----------------------------------------------------------------------

    def _worker(self, ready: concurrent.futures.Future[None]) -> None:
        try:
            if self.num_threads is not None:
                torch.set_num_threads(self.num_threads)
            self._load_model()
        except Exception as exc:
            ready.set_exception(BackendError(f"cannot load model from {self.model_dir}: {exc}"))
            return
        ready.set_result(None)
        try:
            with torch.inference_mode():
                while not self._stopping:
                    self._drain_commands(block=not self._has_work())
                    if self._stopping:
                        break
                    self._step()
        except BaseException as exc:  # pragma: no cover - a bug; fail every request
            log.exception("embedded backend worker crashed")
            self._fail_all(BackendError(f"embedded backend worker crashed: {exc!r}"))
            raise
        finally:
            self._finish_all_aborted()

    def _load_model(self) -> None:
        model, cache_kwarg = load_model(
            self.model_dir, self.dtype, self.attn_implementation, self.device, self._max_context
        )
        if model.config.vocab_size != self._vocab_size:
            raise BackendError("config.json and the model disagree on vocab_size")
        self._cache_kwarg = cache_kwarg
        self._model = model

    def _has_work(self) -> bool:
        return (
            self._batch is not None
            or self._pending is not None
            or (bool(self._waiting) and not self._paused)
        )

    def _drain_commands(self, block: bool) -> None:
        while True:
            try:
                kind, payload = self._commands.get(block=block, timeout=0.5 if block else None)
            except queue.Empty:
                return
            block = False
            if kind == "submit":
                self._waiting.append(payload)
            elif kind == "abort":
                self._abort(payload)
            elif kind == "weights":
                self._apply_weights(*payload)

    def _abort(self, request_id: str) -> None:
        with self._lock:
            seq = self._inflight.get(request_id)
        if seq is None:
            return
        if seq in self._waiting:
            self._waiting.remove(seq)
            self._finish(seq, "aborted")
        else:
            seq.aborted = True  # retired at the start of the next step

    def _apply_weights(
        self, state: dict[str, torch.Tensor], version: int, done: concurrent.futures.Future[None]
    ) -> None:
        try:
            _load_into(self._model, state)
        except WeightLoadError as exc:
            done.set_exception(exc)
            return
        except Exception as exc:
            done.set_exception(WeightLoadError(f"cannot load weights: {exc}"))
            return
        self._version = version
        self._prefix.clear()  # KV computed with the old weights
        if self._pending is not None:  # half prefilled with the old weights: start again
            self._waiting[:0] = self._pending.seqs
            self._pending = None
        done.set_result(None)

    # one scheduler step: retire, admit (prefill), decode
    def _step(self) -> None:
        self._retire()
        if self._pending is not None:
            self._guarded(list(self._pending.seqs), self._prefill_step)
        elif not self._paused and self._waiting:
            room = self.max_batch_size - (len(self._batch.seqs) if self._batch else 0)
            admitted: list[_Seq] = []
            width = 0
            while self._waiting and len(admitted) < room:
                # the tokens this prompt still needs computed (its cached prefix is reused)
                prompt = self._waiting[0].request.prompt_ids
                wider = max(width, len(prompt) - self._prefix.lookup(prompt)[0])
                if admitted and wider * (len(admitted) + 1) > self.max_prefill_tokens:
                    break  # the rest waits for the next step (bounds padding and memory)
                admitted.append(self._waiting.pop(0))
                width = wider
            if admitted:
                self._guarded(admitted, self._admit)
        if self._batch is not None:
            self._guarded(list(self._batch.seqs), self._decode)

    def _guarded(self, seqs: list[_Seq], fn: Any) -> None:
        try:
            fn(seqs)
        except Exception as exc:
            log.exception("embedded backend step failed")
            if self._pending is not None:
                seqs = list({*seqs, *self._pending.seqs})
                self._pending = None
            if self._batch is not None:
                seqs = list({*seqs, *self._batch.seqs})
                self._batch = None
            for seq in seqs:
                if not seq.done:
                    self._finish(seq, "error", error=f"{type(exc).__name__}: {exc}")

    def _retire(self) -> None:
        batch = self._batch
        if batch is None:
            return
        for seq in batch.seqs:
            if seq.aborted and not seq.done:
                self._finish(seq, "aborted")
        keep = [i for i, s in enumerate(batch.seqs) if not s.done]
        if len(keep) == len(batch.seqs):
            return
        for row, seq in enumerate(batch.seqs):
            if seq.done and seq.finish in ("stop", "length"):
                self._prefix_store(seq, row, batch)
        if not keep:
            self._batch = None
            return
        self._batch = keep_rows(batch, keep, self.device)

    def _forward(
        self, cache: Any, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """Logits (float32, ``(B, vocab)``) at the last column; ``mask`` is ``(B, 1, Q, K)``
        bool, True = attend (converted to an additive mask for non-sdpa attention)."""
        if self.attn_implementation != "sdpa":
            additive = torch.zeros(mask.shape, dtype=self.dtype, device=mask.device)
            mask = additive.masked_fill(~mask, torch.finfo(self.dtype).min)
        out = self._model(
            input_ids=tokens,
            position_ids=positions,
            attention_mask=mask,
            use_cache=True,
            logits_to_keep=1,
            **{self._cache_kwarg: cache},
        )
        return out.logits[:, -1, :].float()

    def _admit(self, seqs: list[_Seq]) -> None:
        """Prefill ``seqs`` together and merge them into the running batch.

        Column layout of the new rows' cache: ``[H prefix columns | W suffix columns]``.
        Row r's reused prefix (``h_r`` tokens from the prefix cache) is right-aligned in the
        prefix region and the rest of its prompt right-aligned in the suffix region; the
        columns in between are padding (masked). Suffix positions continue at ``h_r``.
        """
        now = time.time()
        for seq in seqs:
            seq.version_start = self._version
            seq.started = now
        prompts = [s.request.prompt_ids for s in seqs]
        self._prefill_shared(prompts)
        hits = [self._prefix.lookup(p) for p in prompts]
        plan = plan_prefill(prompts, hits, self.device)
        self._pending = _Pending(seqs=seqs, plan=plan)
        self._prefill_step(seqs)

    def _prefill_step(self, seqs: list[_Seq]) -> None:
        """One ``prefill_chunk`` of the group being prefilled; the running rows decode a
        token between two chunks, so a long prompt does not stall them. When the last chunk
        is done the group samples its first tokens and joins the running batch."""
        pending = self._pending
        assert pending is not None
        if all(s.aborted for s in pending.seqs):
            self._pending = None
            for seq in pending.seqs:
                self._finish(seq, "aborted")
            return
        plan = pending.plan
        end = min(pending.start + self.prefill_chunk, plan.width)
        logits = self._forward(
            plan.cache,
            plan.tokens[:, pending.start : end],
            plan.positions[:, pending.start : end],
            plan.mask(pending.start, end),
        )
        pending.start = end
        if end < plan.width:
            return
        self._pending = None
        seqs = pending.seqs
        prompts = [s.request.prompt_ids for s in seqs]
        self.stats["prefills"] += 1
        self.stats["prefix_hit_tokens"] += sum(plan.prefix_lens)
        self.stats["prefill_tokens"] += sum(plan.suffix_lens)
        self.stats["prefix_lookups"] += len(seqs)
        self.stats["prefix_hits"] += sum(1 for h in plan.prefix_lens if h > 0)
        new = _Batch(seqs=seqs, cache=plan.cache, valid=plan.valid)
        if self._prefix.capacity > 0:
            # kept now, not only when it finishes: other sessions' prompts that start the
            # same way (a harness's system prompt and tools) reuse it while it runs
            for row, prompt in enumerate(prompts):
                self._prefix.store(prompt, row, new)
        for row, seq in enumerate(seqs):
            seq.n_cached = len(seq.request.prompt_ids)
            self._sample(seq, logits[row])
        self._merge(new)

    def _run_prefill(self, plan: Any) -> torch.Tensor:
        """Run ``plan``'s suffix columns through the model in ``prefill_chunk`` slices (its
        cache grows in place); the last column's logits ``(G, vocab)``."""
        logits = torch.empty(0)
        for start in range(0, plan.width, self.prefill_chunk):
            end = min(start + self.prefill_chunk, plan.width)
            logits = self._forward(
                plan.cache,
                plan.tokens[:, start:end],
                plan.positions[:, start:end],
                plan.mask(start, end),
            )
        return logits

    def _kv_bytes_per_token(self) -> int:
        cfg = getattr(self._model.config, "text_config", None) or self._model.config
        heads = int(cfg.num_attention_heads)
        head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
        kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
        size = torch.empty((), dtype=self.dtype).element_size()
        return int(cfg.num_hidden_layers) * 2 * kv_heads * head_dim * size

    def _prefill_shared(self, prompts: list[list[int]]) -> None:
        """Prefill once, into the prefix cache, the longest prefix that two of ``prompts``
        share beyond what the cache already holds (at least ``MIN_SHARED_PREFIX`` tokens);
        repeated while such a prefix exists. Without it, every row of the group would
        compute the shared part itself."""
        if self._prefix.capacity <= 0 or len(prompts) < 2:
            return
        per_token = self._kv_bytes_per_token()
        for _ in range(len(prompts) - 1):
            cached = [self._prefix.lookup(p)[0] for p in prompts]
            best, which = 0, -1
            for i in range(len(prompts)):
                for j in range(i + 1, len(prompts)):
                    n = common_prefix_len(prompts[i], prompts[j])
                    if (
                        n > best
                        and n - max(cached[i], cached[j]) >= MIN_SHARED_PREFIX
                        and n * per_token <= self._prefix.capacity
                    ):
                        best, which = n, i
            if which < 0:
                return
            shared = prompts[which][:best]
            plan = plan_prefill([shared], [self._prefix.lookup(shared)], self.device)
            self._run_prefill(plan)
            self._prefix.store(shared, 0, _Batch(seqs=[], cache=plan.cache, valid=plan.valid))
            self.stats["shared_prefills"] += 1
            self.stats["shared_prefill_tokens"] += plan.suffix_lens[0]
            self.stats["prefill_tokens"] += plan.suffix_lens[0]

    # -- prefix cache (KV of finished sequences, reused by prompts that extend them) ---------

    def _prefix_store(self, seq: _Seq, row: int, batch: _Batch) -> None:
        """Keep the KV of a finished row (all of it computed with the current weights)."""
        if self._prefix.capacity <= 0 or seq.version_start != self._version:
            return
        self._prefix.store((seq.request.prompt_ids + seq.completion)[: seq.n_cached], row, batch)

    def _merge(self, new: _Batch) -> None:
        self._batch = merge_batches(self._batch, new)
        self.stats["max_running"] = max(self.stats["max_running"], len(self._batch.seqs))

    def _decode(self, seqs: list[_Seq]) -> None:
        """Feed every running row's pending token; sample the next one."""
        batch = self._batch
        assert batch is not None
        live = [s for s in batch.seqs if not s.done]
        if len(live) != len(batch.seqs):
            self._retire()
            batch = self._batch
            if batch is None:
                return
        dev = self.device
        tokens = torch.tensor([[s.pending] for s in batch.seqs], dtype=torch.long, device=dev)
        positions = torch.tensor([[s.n_cached] for s in batch.seqs], dtype=torch.long, device=dev)
        valid = torch.cat(
            [batch.valid, torch.ones((len(batch.seqs), 1), dtype=torch.bool, device=dev)], 1
        )
        if self.kv_in_place:
            growing(batch.cache)  # once per cache: later steps write into spare room
        logits = self._forward(batch.cache, tokens, positions, valid[:, None, None, :])
        batch.valid = valid
        self.stats["steps"] += 1
        for row, seq in enumerate(batch.seqs):
            seq.n_cached += 1
            if not seq.aborted:
                self._sample(seq, logits[row])

    def _sample(self, seq: _Seq, logits: torch.Tensor) -> None:
        sp = seq.request.sampling
        token, logprob = sample_token(logits, sp, seq.generator)
        if not seq.completion:
            seq.first_token = time.time()
        seq.completion.append(token)
        seq.logprobs.append(logprob)
        seq.pending = token
        self.stats["tokens"] += 1
        seq.emit(TokenDelta([token], [logprob]))
        if token in sp.stop_token_ids:
            self._finish(seq, "stop")
        elif len(seq.completion) >= sp.max_tokens or (
            len(seq.request.prompt_ids) + len(seq.completion) >= self.max_context
        ):
            self._finish(seq, "length")

    def _finish(self, seq: _Seq, reason: Any, error: str | None = None) -> None:
        if seq.done:
            return
        seq.done = True
        seq.finish = str(reason)
        with self._lock:
            self._inflight.pop(seq.request.request_id, None)
        start = seq.version_start if seq.version_start >= 0 else self._version
        seq.emit(
            GenerationResult(
                completion_ids=list(seq.completion),
                completion_logprobs=list(seq.logprobs),
                finish_reason=reason,
                policy_version=start,
                policy_version_end=self._version,
                error=error,
                extra={
                    "backend": self.name,
                    "queued_s": (seq.started or time.time()) - seq.received,
                    "first_token_s": (seq.first_token - seq.started) if seq.first_token else None,
                },
            )
        )

    def _finish_all_aborted(self) -> None:
        with self._lock:
            seqs = list(self._inflight.values())
        for seq in seqs:
            self._finish(seq, "aborted", error="backend closed")
        self._waiting.clear()
        self._batch = None
        self._pending = None

    def _fail_all(self, exc: BackendError) -> None:
        with self._lock:
            seqs = list(self._inflight.values())
            self._inflight.clear()
        for seq in seqs:
            seq.done = True
            seq.emit(exc)
