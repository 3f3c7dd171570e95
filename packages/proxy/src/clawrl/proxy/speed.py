"""The backend's decode speed, as the proxy measures it: from its own call records, or from
one short generation through the model API (:func:`measure_decode_rate`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

import httpx
from clawrl.proxy.errors import ProxyError
from clawrl.proxy.serving import ModelEndpoint

__all__ = ["decode_rate", "measure_decode_rate"]

_PROBE_PROMPT = "Count from 1 to 200, the numbers separated by spaces."


def decode_rate(records: Iterable[Mapping[str, Any]]) -> float | None:
    """Decode tokens per second over call ``records``: the tokens after each call's first
    one, over the time from its first token to its end, summed over the calls with at least
    2 completion tokens (prefill and queueing left out). ``None`` without such a call."""
    tokens, seconds = 0, 0.0
    for r in records:
        n = len(r.get("completion_ids") or [])
        t = r.get("timing") or {}
        first, end = t.get("first_token"), t.get("finished")
        if n >= 2 and first is not None and end is not None and end > first:
            tokens += n - 1
            seconds += float(end) - float(first)
    return tokens / seconds if seconds > 0 else None


async def measure_decode_rate(
    endpoint: ModelEndpoint,
    *,
    run_id: str,
    model: str = "policy",
    max_tokens: int = 32,
    timeout_s: float = 600.0,
) -> float | None:
    """One short generation (at most ``max_tokens`` tokens) in a session of its own
    (task and harness ``speed-probe``) through the proxy's OpenAI API, and the
    :func:`decode_rate` of its record; ``None`` when the call fails or gives fewer than 2
    tokens."""
    admin = endpoint.admin
    session = await admin.create_session(
        run_id=run_id, task_id="speed-probe", harness="speed-probe", group_id="speed-probe"
    )
    body = {
        "model": model,
        "messages": [{"role": "user", "content": _PROBE_PROMPT}],
        "max_tokens": max_tokens,
    }
    transport = httpx.AsyncHTTPTransport(uds=str(endpoint.model_socket))
    try:
        async with httpx.AsyncClient(transport=transport, timeout=timeout_s) as http:
            await http.post(
                f"{session.openai_base_url}/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {session.api_key}"},
            )
    except httpx.HTTPError:
        return None
    finally:
        with contextlib.suppress(ProxyError, OSError):
            await admin.close_session(session.session_id)
    try:
        return decode_rate(await admin.records(session.session_id))
    except (ProxyError, OSError):
        return None
