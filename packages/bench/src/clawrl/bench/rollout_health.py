"""Harness health: a rollout whose harness failed before the policy had a say is never a
reward.

The rule is decided from proof — the proxy's call records of the rollout's session and the
harness process's end (exit status, or killed at the agent timeout) — never from the
harness's log text. It applies to model harnesses only (``needs_model``), after the harness
phase, and only to a harness outcome of ``ok``, ``harness-error`` (not a refused workspace:
that is the agent's doing) or ``timeout``. An *answered* call is a record whose
``finish_reason`` is neither ``error`` nor ``aborted``; a call whose client left while the
model was generating (``aborted``, flagged ``client_left``, at least one token generated)
counts as answered too: the policy had its say, and a generation long enough to outlast the
harness's HTTP timeout is the policy's doing, scored like any failure, never a way out of a
zero. Records are taken in ``seq`` order.

1. ``context-overflow``: the session's last record is a call the proxy refused because its
   prompt does not fit the context window (``error_code`` ``context_length_exceeded``), so
   the harness never got an answer after it, whatever its exit status. It is *excluded*
   (left out of scores and GRPO groups) when that prompt held no assistant or tool message
   (record flag ``no_model_turns``) and no earlier call of the session was answered: the
   harness's own system prompt, tools and task do not fit, which says nothing about the
   policy. When the policy's own turns filled the context, or the policy already had its
   say (a multi-turn harness resumes the conversation from a transcript that the agent
   can rewrite between user turns), the rollout keeps the status but is scored (and
   trained on) with its verified reward: an agent must not escape a zero by flooding its
   context.
2. ``timeout`` (start-up): the harness was killed at the agent timeout and the proxy never
   received a call from it; excluded. A timeout after the first call stays a scored
   ``timeout``.
3. ``harness-error``: the harness ended by itself (any exit status, 0 included) without a
   single answered call: it made no model call, or every call it made failed (e.g. the
   backend failed, or the client left before its answer); excluded. Never ``ok`` with 0.

Excluded rollouts are still verified and keep their reward in the result, for inspection;
they are counted apart per harness (``harness_error_rate``, ``context_overflow_rate``,
``n_excluded``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from clawrl.bench.rollout_types import RolloutStatus
from clawrl.proxy import CLIENT_LEFT_FLAG, CONTEXT_LENGTH_EXCEEDED, NO_MODEL_TURNS_FLAG

__all__ = ["classify_harness_health", "is_answered"]

_UNANSWERED = ("error", "aborted")


def is_answered(record: Mapping[str, Any]) -> bool:
    """Whether a call record got an answer (finish reason neither ``error`` nor
    ``aborted``), or its client left while the model was generating (the policy's doing)."""
    if record.get("finish_reason") not in _UNANSWERED:
        return True
    return (
        record.get("finish_reason") == "aborted"
        and CLIENT_LEFT_FLAG in (record.get("flags") or [])
        and bool(record.get("completion_ids"))
    )


def classify_harness_health(
    harness_out: dict[str, Any],
    records: Sequence[Mapping[str, Any]],
    *,
    needs_model: bool,
) -> dict[str, Any]:
    """The harness outcome ``harness_out`` (the runner's: ``status``, ``reason``,
    ``exit_code``, ``refused``, ...) with the status, reason and ``excluded`` flag the
    module's rule gives from the session's call ``records``; unchanged (``excluded``
    False) where the rule does not apply."""
    out = {**harness_out, "excluded": False}
    status = out["status"]
    if (
        not needs_model
        or out.get("refused")
        or out.get("graded") is not None
        or status not in (RolloutStatus.OK, RolloutStatus.HARNESS_ERROR, RolloutStatus.TIMEOUT)
    ):
        return out
    recs = sorted(records, key=lambda r: int(r.get("seq", 0)))
    last = recs[-1] if recs else None
    if last is not None and last.get("error_code") == CONTEXT_LENGTH_EXCEEDED:
        # the harness's own prompt, before the policy had a say: once a call of the session
        # was answered, a prompt without model turns is what the harness made of the policy's
        # doings (a multi-turn harness resumes the conversation from a transcript in the
        # agent's sandbox, which the agent can rewrite), never a way out of a zero
        first_turn = NO_MODEL_TURNS_FLAG in (last.get("flags") or []) and not any(
            is_answered(r) for r in recs[:-1]
        )
        whose = (
            "the harness's own prompt (no model turn yet)"
            if first_turn
            else "the prompt, after the model's own turns,"
        )
        out.update(
            status=RolloutStatus.CONTEXT_OVERFLOW,
            excluded=first_turn,
            reason=f"{whose} does not fit the context window: {last.get('error') or ''}".strip(),
        )
    elif status is RolloutStatus.TIMEOUT and not recs:
        out.update(
            excluded=True,
            reason=f"{out['reason']}; no model call yet (the harness was still starting)",
        )
    elif status is not RolloutStatus.TIMEOUT and not any(is_answered(r) for r in recs):
        what = "made no model call" if not recs else f"got no answer to its {len(recs)} call(s)"
        out.update(
            status=RolloutStatus.HARNESS_ERROR,
            excluded=True,
            reason=f"the harness {what} (exit status {out.get('exit_code')}); {out['reason']}",
        )
    return out
