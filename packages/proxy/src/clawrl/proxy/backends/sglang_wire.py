"""SGLang's native API on the wire: the backend's typed errors, and the parsing of what the
server answers (status errors, in-stream errors, SSE chunks, new tokens per chunk).
Re-exported by :mod:`clawrl.proxy.backends.sglang`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import orjson
from clawrl.proxy.backends.base import BackendError

__all__ = [
    "InvalidTokenIdError",
    "SGLangRequestError",
    "SGLangUnavailableError",
    "in_stream_error",
    "new_tokens",
    "read_model_config",
    "sse_json",
    "status_error",
]


class SGLangUnavailableError(BackendError):
    """The SGLang server cannot be reached, or failed (5xx, connection lost, malformed reply)."""


class SGLangRequestError(BackendError):
    """SGLang (or this client, before sending) rejected a request as invalid (HTTP 4xx).

    Attributes:
        status: the HTTP status SGLang answered, or None when rejected before sending.
    """

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        self.status = status


class InvalidTokenIdError(SGLangRequestError, ValueError):
    """A token id is outside ``[0, vocab_size)`` (or not an integer). Raised before the
    request is sent: such an id crashes a CPU SGLang server.

    Attributes:
        position: index of the first bad id in the list checked.
        token_id: the offending value.
        field: ``"prompt_ids"`` or ``"stop_token_ids"``.
    """

    def __init__(self, message: str, *, position: int, token_id: object, field: str):
        super().__init__(message)
        self.position = position
        self.token_id = token_id
        self.field = field


def read_model_config(model_path: object) -> dict[str, Any]:
    """``config.json`` of the served model directory, or {} when it cannot be read here."""
    if not isinstance(model_path, str):
        return {}
    try:
        data = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def status_error(status: int, route: str, text: str) -> BackendError:
    msg = f"SGLang {route} answered HTTP {status}: {text[:500]}"
    if 400 <= status < 500:
        return SGLangRequestError(msg, status=status)
    return SGLangUnavailableError(msg)


def in_stream_error(err: object) -> BackendError:
    if isinstance(err, Mapping):
        code = err.get("code")
        msg = f"SGLang /generate error: {err.get('message', err)!s}"
        if isinstance(code, int) and 400 <= code < 500:
            return SGLangRequestError(msg, status=code)
        return SGLangUnavailableError(msg)
    return SGLangUnavailableError(f"SGLang /generate error: {err!s}")


async def sse_json(resp: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON objects of an SSE stream's ``data:`` lines, up to ``[DONE]``."""
    async for line in resp.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise SGLangUnavailableError(f"malformed SGLang stream chunk: {data[:200]!r}") from e
        if not isinstance(obj, dict):
            raise SGLangUnavailableError(f"unexpected SGLang stream chunk: {data[:200]!r}")
        yield obj


def new_tokens(chunk: Mapping[str, Any], have: int) -> tuple[list[int], list[float]]:
    """The tokens of ``chunk`` not seen yet, with their logprobs.

    Cumulative chunks (SGLang's default) repeat everything; incremental ones
    (``--incremental-streaming-output``) hold only new tokens: a chunk whose
    ``meta_info.completion_tokens`` equals ``have + len(output_ids)`` is incremental.

    Raises:
        SGLangUnavailableError: ids and logprobs disagree (a malformed reply).
    """
    out_ids = chunk.get("output_ids")
    meta = chunk.get("meta_info") or {}
    raw_lps = meta.get("output_token_logprobs")
    if not isinstance(out_ids, list):
        raise SGLangUnavailableError(
            "SGLang reply has no output_ids (was the server started without "
            "--skip-tokenizer-init and with an old version?)"
        )
    if not isinstance(raw_lps, list):
        raise SGLangUnavailableError("SGLang reply has no meta_info.output_token_logprobs")
    completion_tokens = meta.get("completion_tokens")
    incremental = (
        isinstance(completion_tokens, int)
        and completion_tokens == have + len(out_ids)
        and completion_tokens != len(out_ids)
    )
    if incremental:
        new_ids, new_lps = out_ids, raw_lps
    else:
        if len(out_ids) < have:
            raise SGLangUnavailableError(
                f"SGLang stream went backwards: {len(out_ids)} tokens after {have}"
            )
        new_ids, new_lps = out_ids[have:], raw_lps[have:]
    if len(new_lps) != len(new_ids):
        raise SGLangUnavailableError(
            f"SGLang returned {len(new_ids)} new ids but {len(new_lps)} logprobs"
        )
    ids: list[int] = []
    lps: list[float] = []
    for tid, entry in zip(new_ids, new_lps, strict=True):
        lp = entry[0] if isinstance(entry, list | tuple) else entry
        if isinstance(entry, list | tuple) and len(entry) > 1 and entry[1] != tid:
            raise SGLangUnavailableError(
                f"SGLang logprob entry {entry!r} does not match output id {tid}"
            )
        if not isinstance(tid, int) or not isinstance(lp, int | float):
            raise SGLangUnavailableError(f"malformed SGLang token entry {tid!r}, {entry!r}")
        ids.append(tid)
        lps.append(float(lp))
    return ids, lps
