"""The call pipeline shared by every wire API.

request (normalised by the API module) -> prompt ids (template + splices) -> sampling policy ->
backend generation (buffered whole; aborted if the client disconnects) -> parse -> record.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from clawrl.proxy.backends.base import (
    BackendError,
    GenerationRequest,
    GenerationResult,
    InferenceBackend,
    SamplingParams,
    TokenDelta,
)
from clawrl.proxy.call import CallOutcome, ChatCall, ClientDisconnected, TrainingSampling
from clawrl.proxy.errors import (
    BackendUnavailableError,
    ContextLengthExceededError,
    ProxyError,
    ProxyRequestError,
)
from clawrl.proxy.parse import parse_completion
from clawrl.proxy.record import (
    CLIENT_LEFT_FLAG,
    CONTEXT_OVERFLOW_FLAG,
    NO_MODEL_TURNS_FLAG,
    CallRecord,
)
from clawrl.proxy.render import ChatRenderer
from clawrl.proxy.session import Session, SessionManager, call_seed
from clawrl.proxy.splice import (
    Generation,
    PromptBuild,
    build_prompt,
    canonical_key,
    text_chars,
)

__all__ = ["CallOutcome", "ChatCall", "ClientDisconnected", "ProxyCore", "TrainingSampling"]

log = logging.getLogger("clawrl.proxy")


class ProxyCore:
    """Sessions + renderer + backend + sampling policy + capture.

    Args:
        renderer: chat template and tokenizer of the served model.
        backend: the inference backend.
        sessions: the session manager (holds the capture directory).
        served_model: model id reported by ``/v1/models``.
        body_capture_limit: request/response bodies larger than this (bytes of JSON) are
            recorded as ``{"_truncated": true, "bytes": n}``; 0 records none.
        abort_grace_s: after a disconnect, seconds to wait for the backend to end the aborted
            generation before cancelling it.
        default_max_tokens: completion cap of a request that gives none; None: the room left
            in the context window (``max_context - prompt tokens``) is the only cap. Either
            way the cap applied is recorded in ``sampling.max_tokens`` (with
            ``sampling.max_tokens_source``).
        max_context: serve at most this many tokens per call (prompt + completion), below
            the backend's own limit: a longer call gets the typed context-length error the
            backend's limit gives. A trainer sets it to what it can train on in one forward.
            None: the backend's limit.
    """

    def __init__(
        self,
        renderer: ChatRenderer,
        backend: InferenceBackend,
        sessions: SessionManager,
        *,
        served_model: str = "clawrl",
        body_capture_limit: int = 1 << 20,
        abort_grace_s: float = 5.0,
        default_max_tokens: int | None = None,
        max_context: int | None = None,
    ):
        if default_max_tokens is not None and default_max_tokens < 1:
            raise ValueError("default_max_tokens must be >= 1")
        if max_context is not None and max_context < 2:
            raise ValueError("max_context must be >= 2 (a prompt token and a completion token)")
        self.context_cap = max_context
        self.default_max_tokens = default_max_tokens
        self.renderer = renderer
        self.backend = backend
        self.sessions = sessions
        self.served_model = served_model
        self.body_capture_limit = body_capture_limit
        self.abort_grace_s = abort_grace_s
        self.training_sampling: TrainingSampling | None = None
        self._gate = asyncio.Event()
        self._gate.set()
        self.paused = False
        self._inflight: dict[str, asyncio.Task[Any]] = {}

    @property
    def max_context(self) -> int:
        """Most tokens one call may hold (prompt + completion): the backend's limit, or the
        lower ``max_context`` this proxy was given."""
        limit = self.backend.max_context
        return limit if self.context_cap is None else min(limit, self.context_cap)

    # -- admin operations --------------------------------------------------------------------

    async def pause(self) -> None:
        """New generations wait until :meth:`resume`; in-flight ones finish."""
        self.paused = True
        self._gate.clear()
        await self.backend.pause()

    async def resume(self) -> None:
        self.paused = False
        await self.backend.resume()
        self._gate.set()

    async def close_session(self, session_id: str, grace_s: float = 5.0) -> dict[str, Any]:
        """Close a session once every call of it is committed; its description.

        New calls are refused at once. Calls in flight get ``grace_s`` seconds to finish and
        be written; then their generations are aborted (recorded as ``aborted``) and waited
        for as long again. So the records read after this returns are final: nothing is
        appended later. A call still unwritten after that (a handler that never committed)
        is named in ``uncommitted`` of the result, never dropped silently.

        Raises:
            SessionNotFoundError: no such session.
        """
        session = self.sessions.get(session_id)
        session.closing = True
        if not await session.wait_committed(grace_s):
            for call_id in list(session.pending):
                task = self._inflight.get(call_id)
                if task is not None:
                    await self._abort_quietly(call_id, task)
            await session.wait_committed(grace_s)
        self.sessions.close(session_id)
        return {**session.describe(), "uncommitted": sorted(session.pending)}

    # -- prompts ----------------------------------------------------------------------------

    def build_prompt(self, session: Session | None, call: ChatCall) -> PromptBuild:
        """The prompt ids of ``call``.

        Before anything is tokenized, the characters of the client's strings are counted:
        more than ``max_context * renderer.max_chars_per_token`` cannot fit in the context
        and are refused at once, so a huge message costs one pass over its text, not a
        tokenization that would hold the event loop (and every other session) for seconds.
        Tokenizing also stops as soon as the prompt leaves no room for a completion token.

        Raises:
            ContextLengthExceededError: the prompt cannot fit in the context window.
            ProxyRequestError: the template cannot render the conversation, or it nests so
                deeply that rendering would reach Python's recursion limit.
        """
        limit = self.max_context
        cache = session.prompt_cache if session is not None else None
        if cache is not None:
            chars = cache.text_chars(call.messages, call.tools)
        else:
            chars = text_chars([call.messages, call.tools])
        if chars > limit * self.renderer.max_chars_per_token:
            raise ContextLengthExceededError(
                f"prompt is too long: {chars} characters of text, more than this model's "
                f"maximum context length of {limit} tokens can take (at most "
                f"{self.renderer.max_chars_per_token} characters per token)",
                param="messages",
            )
        try:
            return build_prompt(
                self.renderer,
                call.messages,
                call.tools,
                session.memory if session else None,
                max_tokens=limit - 1,
                cache=cache,
            )
        except RecursionError as e:
            # a backstop: the parsers bound every nesting the client controls (MAX_JSON_DEPTH)
            raise ProxyRequestError(
                "the conversation nests too deeply to be rendered",
                param="messages",
                code="json_too_deep",
            ) from e

    def sampling_for(
        self, call: ChatCall, prompt_len: int
    ) -> tuple[SamplingParams, dict[str, Any]]:
        """The sampling parameters applied to a call, and their record.

        Raises:
            ContextLengthExceededError: the prompt fills the context window.
        """
        limit = self.max_context
        room = limit - prompt_len
        if room < 1:
            raise ContextLengthExceededError(
                f"prompt is too long: {prompt_len} tokens > {limit - 1} "
                f"maximum (this model's maximum context length is {limit} "
                "tokens, one of which the completion needs)",
                param="messages",
            )
        # A request without max_tokens gets the room left in the context window, capped by
        # the server's default when one is configured (README "max_tokens").
        caps = [room]
        source = "context"
        if call.max_tokens is not None:
            caps.append(call.max_tokens)
            source = "request" if call.max_tokens < room else "context"
        elif self.default_max_tokens is not None:
            caps.append(self.default_max_tokens)
            source = "server_default" if self.default_max_tokens < room else "context"
        ts = self.training_sampling
        if ts is not None:
            if ts.max_tokens is not None:
                caps.append(ts.max_tokens)
                if ts.max_tokens < min(caps[:-1]):
                    source = "training"
            temperature, top_p, top_k = ts.temperature, ts.top_p, ts.top_k
            mode = "training"
        else:
            temperature = 1.0 if call.temperature is None else call.temperature
            top_p = 1.0 if call.top_p is None else call.top_p
            top_k = -1 if call.top_k is None else call.top_k
            mode = "eval"
        if top_k >= self.backend.vocab_size:
            top_k = -1  # the whole vocabulary: the same distribution as no top-k
        params = SamplingParams(
            max_tokens=min(caps),
            temperature=float(temperature),
            top_p=float(top_p),
            top_k=int(top_k),
            stop_token_ids=self.renderer.stop_token_ids,
            seed=call.seed,
        )
        rec: dict[str, Any] = {
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k,
            "stop_token_ids": list(params.stop_token_ids),
            "seed": params.seed,
        }
        rec.update(
            max_tokens_source=source,
            mode=mode,
            backend=self.backend.name,
            requested={
                "temperature": call.temperature,
                "top_p": call.top_p,
                "top_k": call.top_k,
                "max_tokens": call.max_tokens,
            },
        )
        return params, rec

    # -- the call ---------------------------------------------------------------------------

    async def run_call(
        self,
        session: Session,
        call: ChatCall,
        *,
        received: float,
        disconnected: Callable[[], Awaitable[Any]] | None = None,
    ) -> CallOutcome:
        """Generate the answer to ``call``; the record is written by :meth:`commit`.

        Raises:
            ProxyRequestError: the prompt cannot be rendered or does not fit.
            BackendUnavailableError: the backend failed (the call is recorded as "error").
            ClientDisconnected: the client left; the generation was aborted and recorded.
        """
        build: PromptBuild | None = None
        try:
            build = self.build_prompt(session, call)
            self._check_prompt_vocab(build.ids)
            params, sampling_rec = self.sampling_for(call, len(build.ids))
        except ContextLengthExceededError as e:
            self._record_overflow(session, call, e, received, build.ids if build else [])
            raise
        seq = session.next_seq()
        call_id = "call-" + secrets.token_hex(12)
        session.begin(call_id)
        if params.seed is None and session.sampling_seed is not None:
            # the session's own stream: independent of other sessions' arrival order
            params = dataclasses.replace(params, seed=call_seed(session.sampling_seed, seq))
            sampling_rec["seed"] = params.seed
            sampling_rec["seed_source"] = "session"
        record = self._new_record(session, call, build, call_id, seq, sampling_rec, received)
        request = GenerationRequest(
            request_id=call_id,
            prompt_ids=build.ids,
            sampling=params,
            session_id=session.session_id,
        )
        result, first = await self._generate(session, record, request, disconnected)
        return self._outcome(session, call, record, result, first)

    def _record_overflow(
        self,
        session: Session,
        call: ChatCall,
        err: ContextLengthExceededError,
        received: float,
        prompt_ids: list[int],
    ) -> None:
        """Write the record of a call refused because its prompt does not fit the context
        window (the client gets the typed 400): finish reason ``error``, ``error_code``
        ``context_length_exceeded``, no completion; ``prompt_ids`` as far as they were
        tokenized (empty when the text was refused by its length alone). Flagged
        ``context_overflow``, and ``no_model_turns`` when the prompt holds no assistant or
        tool message, i.e. nothing the model wrote: the harness's own prompt (system
        prompt, tools, task) is what does not fit."""
        now = time.time()
        flags = [CONTEXT_OVERFLOW_FLAG]
        if not any(m.get("role") in ("assistant", "tool") for m in call.messages):
            flags.append(NO_MODEL_TURNS_FLAG)
        version = self.backend.policy_version
        record: CallRecord = {
            "call_id": "call-" + secrets.token_hex(12),
            "session_id": session.session_id,
            "run_id": session.run_id,
            "seq": session.next_seq(),
            "api": call.api,
            "model": call.model,
            "metadata": session.metadata,
            "prompt_ids": list(prompt_ids),
            "completion_ids": [],
            "completion_logprobs": [],
            "finish_reason": "error",
            "prompt_relation": {"kind": "first", "parent_call_id": None, "diverged_at": None},
            "spliced": [],
            "flags": flags,
            "policy_version": version,
            "policy_version_end": version,
            "sampling": {},
            "timing": {"received": received, "started": None, "first_token": None, "finished": now},
            "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": 0},
            "request": self._capped(call.body),
            "response": None,
            "error": f"{err.code}: {err.message}",
            "error_code": err.code,
        }
        session.write(record)

    def _check_prompt_vocab(self, prompt_ids: list[int]) -> None:
        """Refuse a prompt with ids outside the backend's vocabulary."""
        vocab = self.backend.vocab_size
        # Rendered ids lie below the tokenizer's size and spliced ids came from the backend,
        # so the scan is needed only when the tokenizer is larger than the model's vocabulary.
        if (
            self.renderer.vocab_size > vocab
            and prompt_ids
            and (min(prompt_ids) < 0 or max(prompt_ids) >= vocab)
        ):
            bad = [t for t in prompt_ids if not 0 <= t < vocab]
            raise ProxyRequestError(
                f"the prompt has token ids outside the backend's vocabulary: {bad[:3]}"
            )

    def _new_record(
        self,
        session: Session,
        call: ChatCall,
        build: PromptBuild,
        call_id: str,
        seq: int,
        sampling_rec: dict[str, Any],
        received: float,
    ) -> CallRecord:
        """The call's record before generation (finish reason "error" until it ends), with
        the prompt's relation to the session's history and its flags; sets the session's
        anchor (the prompt up to its first user or tool unit) on its first call."""
        prompt_ids = build.ids
        relation = session.history.relation(prompt_ids, bool(build.spliced))
        flags: list[str] = []
        anchor = session.history.anchor
        if anchor is None:
            for end, role in build.unit_ends:
                if role == "user" or role == "tool":
                    session.history.anchor = anchor = prompt_ids[:end]
                    break
        elif prompt_ids[: len(anchor)] != anchor:
            flags.append("side_path")
        return {
            "call_id": call_id,
            "session_id": session.session_id,
            "run_id": session.run_id,
            "seq": seq,
            "api": call.api,
            "model": call.model,
            "metadata": session.metadata,
            "prompt_ids": prompt_ids,
            "completion_ids": [],
            "completion_logprobs": [],
            "finish_reason": "error",
            "prompt_relation": relation,
            "spliced": build.spliced,
            "flags": flags,
            "policy_version": None,
            "policy_version_end": None,
            "sampling": sampling_rec,
            "timing": {
                "received": received,
                "started": None,
                "first_token": None,
                "finished": None,
            },
            "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": 0},
            "request": self._capped(call.body),
            "response": None,
            "error": None,
        }

    async def _generate(
        self,
        session: Session,
        record: CallRecord,
        request: GenerationRequest,
        disconnected: Callable[[], Awaitable[Any]] | None,
    ) -> tuple[GenerationResult, list[float]]:
        """Run the generation (after the pause gate) and return its result and the time of
        its first token (a list of at most one). A failed, aborted or disconnected
        generation is recorded and committed here, then raised."""
        call_id = request.request_id
        ids: list[int] = []
        lps: list[float] = []
        first: list[float] = []

        async def consume() -> GenerationResult:
            await self._gate.wait()  # paused: wait here (a disconnect still aborts)
            record["timing"]["started"] = time.time()
            result: GenerationResult | None = None
            async for item in self.backend.generate(request):
                if isinstance(item, TokenDelta):
                    if not first:
                        first.append(time.time())
                    ids.extend(item.token_ids)
                    lps.extend(item.logprobs)
                else:
                    result = item
            if result is None:
                raise BackendError("the backend ended a generation without a result")
            return result

        gen_task: asyncio.Task[GenerationResult] = asyncio.ensure_future(consume())
        self._inflight[call_id] = gen_task
        try:
            result = await self._await_generation(gen_task, call_id, disconnected)
        except ClientDisconnected:
            record["flags"].append(CLIENT_LEFT_FLAG)
            self._commit_failed(session, record, ids, lps, "aborted", None, first)
            raise
        except asyncio.CancelledError:
            await self._abort_quietly(call_id, gen_task)
            self._commit_failed(session, record, ids, lps, "aborted", None, first)
            raise
        except Exception as e:
            if not isinstance(e, BackendError | OSError | ProxyError):
                log.exception("backend failure")
            error = f"{type(e).__name__}: {e}"
            self._commit_failed(session, record, ids, lps, "error", None, first, error)
            raise BackendUnavailableError(f"the inference backend failed: {e}") from e
        finally:
            self._inflight.pop(call_id, None)
        if result.finish_reason in ("error", "aborted"):
            self._commit_failed(
                session,
                record,
                list(result.completion_ids),
                result.completion_logprobs,
                result.finish_reason,
                result,
                first,
                result.error or f"generation {result.finish_reason}",
            )
            raise BackendUnavailableError(
                f"the generation ended with {result.finish_reason}: {result.error or ''}".strip(),
                code="generation_" + result.finish_reason,
            )
        return result, first

    def _outcome(
        self,
        session: Session,
        call: ChatCall,
        record: CallRecord,
        result: GenerationResult,
        first: list[float],
    ) -> CallOutcome:
        """Parse a finished generation, complete its record and remember it in the session
        (splice memory and history)."""
        call_id = record["call_id"]
        prompt_ids = record["prompt_ids"]
        completion = list(result.completion_ids)
        text = self.renderer.decode(completion)
        parsed = parse_completion(
            text,
            finish_reason=result.finish_reason,
            stop_texts=tuple(self.renderer.decode([t]) for t in self.renderer.stop_token_ids),
            parse_tool_calls=call.parse_tool_calls,
            json_calls=self.renderer.json_tool_calls,
            tool_names=[str(t.get("function", t).get("name")) for t in call.tools or []],
        )
        if parsed.tool_calls and result.finish_reason == "stop":
            finish = "tool_calls"
        else:
            finish = result.finish_reason
        record["flags"].extend(parsed.flags)
        self._finish_record(
            record, session, completion, list(result.completion_logprobs), finish, result, first
        )
        tool_ids = [secrets.token_hex(12) for _ in parsed.tool_calls]
        record["parsed"] = {
            "reasoning": parsed.reasoning,
            "content": parsed.content,
            "tool_calls": [
                {"id": i, "name": c.name, "arguments": c.arguments}
                for i, c in zip(tool_ids, parsed.tool_calls, strict=True)
            ],
        }
        key = canonical_key(
            parsed.reasoning, parsed.content, [(c.name, c.arguments) for c in parsed.tool_calls]
        )
        session.memory.remember(key, Generation(call_id, tuple(prompt_ids), tuple(completion)))
        session.history.add(call_id, prompt_ids, completion)
        return CallOutcome(
            call_id=call_id,
            parsed=parsed,
            finish_reason=finish,
            prompt_tokens=len(prompt_ids),
            completion_tokens=len(completion),
            tool_call_ids=tool_ids,
            record=record,
            completion_ids=completion,
            completion_logprobs=list(result.completion_logprobs)[: len(completion)],
        )

    def commit(
        self, session: Session, outcome: CallOutcome, response: dict[str, Any] | None
    ) -> None:
        """Write the record of a successful call (with the response body sent)."""
        outcome.record["response"] = self._capped(response)
        session.write(outcome.record)

    # -- helpers ----------------------------------------------------------------------------

    async def _await_generation(
        self,
        gen_task: asyncio.Task[GenerationResult],
        call_id: str,
        disconnected: Callable[[], Awaitable[Any]] | None,
    ) -> GenerationResult:
        if disconnected is None:
            return await gen_task
        dc_task = asyncio.ensure_future(disconnected())
        try:
            done, _ = await asyncio.wait({gen_task, dc_task}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            dc_task.cancel()
            raise
        if gen_task in done:
            dc_task.cancel()
            return gen_task.result()
        await self._abort_quietly(call_id, gen_task)
        raise ClientDisconnected(call_id)

    async def _abort_quietly(self, call_id: str, gen_task: asyncio.Task[GenerationResult]) -> None:
        try:
            await self.backend.abort(call_id)
        except Exception:
            log.warning("backend abort failed for %s", call_id, exc_info=True)
        try:
            await asyncio.wait_for(asyncio.shield(gen_task), self.abort_grace_s)
        except (TimeoutError, asyncio.CancelledError, Exception):
            gen_task.cancel()

    def _finish_record(
        self,
        record: CallRecord,
        session: Session,
        ids: list[int],
        lps: list[float],
        finish: str,
        result: GenerationResult | None,
        first: list[float],
    ) -> None:
        record["completion_ids"] = list(ids)
        record["completion_logprobs"] = list(lps)[: len(ids)]
        record["finish_reason"] = finish
        version = self.backend.policy_version
        record["policy_version"] = result.policy_version if result else version
        record["policy_version_end"] = result.policy_version_end if result else version
        if record["policy_version_end"] != record["policy_version"]:
            record["flags"].append("stale")
        record["timing"]["first_token"] = first[0] if first else None
        record["timing"]["finished"] = time.time()
        record["usage"]["completion_tokens"] = len(ids)
        if result is not None and result.extra:
            record["backend_extra"] = result.extra

    def _commit_failed(
        self,
        session: Session,
        record: CallRecord,
        ids: list[int],
        lps: list[float],
        finish: str,
        result: GenerationResult | None,
        first: list[float],
        error: str | None = None,
    ) -> None:
        """Complete the record of a call that ended without an answer (with ``error`` when
        given), add it to the session's history and write it."""
        self._finish_record(record, session, ids, lps, finish, result, first)
        if error is not None:
            record["error"] = error
        session.history.add(record["call_id"], record["prompt_ids"], list(ids))
        session.write(record)

    def _capped(self, body: Any) -> Any:
        if body is None or self.body_capture_limit <= 0:
            return None
        try:
            n = len(orjson.dumps(body))
        except (TypeError, orjson.JSONEncodeError):
            return None
        if n > self.body_capture_limit:
            return {"_truncated": True, "bytes": n}
        return body
