"""The typed model-call record a prefix tree is built from.

A :class:`Call` holds the fields of the proxy's call record (docs/architecture.md, "Call
record") that the tree needs; :meth:`Call.from_record` reads a record dict as the proxy writes
it (one JSONL line, parsed).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from clawrl.prefixtree.errors import InvalidCallError

__all__ = ["SIDE_PATH_FLAG", "UNTRAINABLE_FINISH_REASONS", "Call", "is_trainable_record"]

#: Finish reasons of calls whose completion is not trained on: the generation failed
#: (``error``) or was cut off before the harness saw it (``aborted``).
UNTRAINABLE_FINISH_REASONS = frozenset({"error", "aborted"})


def is_trainable_record(record: Mapping[str, Any]) -> bool:
    """Whether a call record's completion can be trained on: the model generated at least
    one token (``completion_ids`` non-empty) and the call finished
    (``finish_reason`` not in :data:`UNTRAINABLE_FINISH_REASONS`)."""
    return bool(record.get("completion_ids")) and (
        record.get("finish_reason") not in UNTRAINABLE_FINISH_REASONS
    )


#: Flag (in :attr:`Call.flags`) by which the proxy or a filter marks a call as a side path.
SIDE_PATH_FLAG = "side_path"

# Record keys copied into Call.metadata by from_record (small, useful for analysis). The
# request/response bodies are deliberately left out (they can be large).
_METADATA_KEYS = (
    "run_id",
    "api",
    "model",
    "finish_reason",
    "spliced",
    "error",
    "prompt_relation",
    "policy_version_end",
    "sampling",
    "timing",
)

# Token ids, seq and policy versions are stored as int64.
_INT64_MAX = int(np.iinfo(np.int64).max)

# A recorded logprob is log softmax(...) <= 0; engines may round to a hair above 0.
_LOGPROB_TOLERANCE = 1e-3


def _token_array(value: Any, name: str, call_id: str) -> np.ndarray:
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise InvalidCallError(f"call {call_id!r}: {name} is not a token-id sequence") from exc
    if arr.ndim != 1:
        raise InvalidCallError(f"call {call_id!r}: {name} must be 1-D, got shape {arr.shape}")
    if arr.size == 0:
        arr = arr.astype(np.int64)
    if not np.issubdtype(arr.dtype, np.integer):
        raise InvalidCallError(f"call {call_id!r}: {name} must hold integers, got {arr.dtype}")
    if arr.size and int(arr.min()) < 0:
        raise InvalidCallError(f"call {call_id!r}: {name} holds a negative token id")
    if arr.size and int(arr.max()) > _INT64_MAX:  # uint64 input: would wrap to negative
        raise InvalidCallError(f"call {call_id!r}: {name} holds a token id beyond int64")
    out = arr.astype(np.int64, copy=False).view()
    out.flags.writeable = False
    return out


def _logprob_array(value: Any, call_id: str) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidCallError(f"call {call_id!r}: completion_logprobs are not numbers") from exc
    if arr.ndim != 1:
        raise InvalidCallError(
            f"call {call_id!r}: completion_logprobs must be 1-D, got shape {arr.shape}"
        )
    if arr.size and (not np.all(np.isfinite(arr)) or float(arr.max()) > _LOGPROB_TOLERANCE):
        raise InvalidCallError(
            f"call {call_id!r}: completion_logprobs must be finite natural-log probabilities <= 0"
        )
    out = arr.view()
    out.flags.writeable = False
    return out


def _flag_set(value: Any, call_id: str) -> frozenset[str]:
    if value is None:
        return frozenset()
    if isinstance(value, str):
        return frozenset({value})
    if isinstance(value, bytes | bytearray):  # iterating would give byte values as names
        raise InvalidCallError(f"call {call_id!r}: flags must be names (str), got bytes")
    if isinstance(value, Mapping):
        return frozenset(str(k) for k, v in value.items() if v)
    if isinstance(value, Iterable):
        return frozenset(str(v) for v in value)
    raise InvalidCallError(f"call {call_id!r}: flags must be a list of names or a name→bool map")


@dataclass(frozen=True, eq=False)
class Call:
    """One model call: its prompt and what the model generated.

    Attributes:
        call_id: unique id of the call (the proxy's ``call_id``).
        session_id: proxy session the call belongs to.
        seq: order in which the proxy received the session's calls (int, >= 0).
        prompt_ids: int64 [P], P >= 1, the exact prompt token ids the engine saw.
        completion_ids: int64 [C], C >= 0, the token ids the engine generated.
        completion_logprobs: float64 [C], natural-log probability of each generated token
            at the applied temperature (log softmax(logits / T)[token]).
        policy_version: weight version at the start of generation (int, >= 0).
        flags: names of the record's flags (e.g. ``side_path``, ``ill_formed_tool_call``).
        metadata: free-form JSON-serializable metadata (finish_reason, prompt_relation, ...).

    Arrays are stored read-only, as int64 / float64 (converted once at construction; no copy
    when the input already has that dtype).

    Raises:
        InvalidCallError: empty ``call_id``, ``seq`` or ``policy_version`` negative or
            beyond int64, an empty or non-integer ``prompt_ids``, token ids negative or beyond
            int64, ``flags`` given as bytes, ``completion_logprobs`` whose
            length differs from ``completion_ids`` or which are NaN, infinite or > 0.
    """

    call_id: str
    session_id: str
    seq: int
    prompt_ids: np.ndarray
    completion_ids: np.ndarray
    completion_logprobs: np.ndarray
    policy_version: int = 0
    flags: frozenset[str] = field(default_factory=frozenset)
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        cid = self.call_id
        if not isinstance(cid, str) or not cid:
            raise InvalidCallError(f"call_id must be a non-empty string, got {cid!r}")
        if not isinstance(self.session_id, str):
            raise InvalidCallError(f"call {cid!r}: session_id must be a string")
        for name in ("seq", "policy_version"):
            v = getattr(self, name)
            if (
                isinstance(v, bool)
                or not isinstance(v, (int, np.integer))
                or v < 0
                or int(v) > _INT64_MAX
            ):
                raise InvalidCallError(
                    f"call {cid!r}: {name} must be an int in [0, 2**63), got {v!r}"
                )
            object.__setattr__(self, name, int(v))
        prompt = _token_array(self.prompt_ids, "prompt_ids", cid)
        if prompt.size == 0:
            raise InvalidCallError(
                f"call {cid!r}: prompt_ids is empty (a generated token needs a context)"
            )
        completion = _token_array(self.completion_ids, "completion_ids", cid)
        logprobs = _logprob_array(self.completion_logprobs, cid)
        if logprobs.shape != completion.shape:
            raise InvalidCallError(
                f"call {cid!r}: {logprobs.size} completion_logprobs for "
                f"{completion.size} completion_ids (one logprob per generated token)"
            )
        object.__setattr__(self, "prompt_ids", prompt)
        object.__setattr__(self, "completion_ids", completion)
        object.__setattr__(self, "completion_logprobs", logprobs)
        object.__setattr__(self, "flags", _flag_set(self.flags, cid))
        if not isinstance(self.metadata, dict):
            raise InvalidCallError(f"call {cid!r}: metadata must be a dict")

    @property
    def num_tokens(self) -> int:
        """Length of the call's path: ``len(prompt_ids) + len(completion_ids)``."""
        return int(self.prompt_ids.shape[0] + self.completion_ids.shape[0])

    @property
    def token_ids(self) -> np.ndarray:
        """int64 [P + C]: prompt then completion (a new array)."""
        return np.concatenate((self.prompt_ids, self.completion_ids))

    @property
    def side_path(self) -> bool:
        """True if the record carries the ``side_path`` flag."""
        return SIDE_PATH_FLAG in self.flags

    def with_flags(self, *flags: str) -> Call:
        """A copy of the call with ``flags`` added (arrays shared, not copied)."""
        return Call(
            call_id=self.call_id,
            session_id=self.session_id,
            seq=self.seq,
            prompt_ids=self.prompt_ids,
            completion_ids=self.completion_ids,
            completion_logprobs=self.completion_logprobs,
            policy_version=self.policy_version,
            flags=self.flags | frozenset(flags),
            metadata=self.metadata,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Call):
            return NotImplemented
        return (
            self.call_id == other.call_id
            and self.session_id == other.session_id
            and self.seq == other.seq
            and self.policy_version == other.policy_version
            and self.flags == other.flags
            and self.metadata == other.metadata
            and np.array_equal(self.prompt_ids, other.prompt_ids)
            and np.array_equal(self.completion_ids, other.completion_ids)
            and np.array_equal(self.completion_logprobs, other.completion_logprobs)
        )

    __hash__ = None  # type: ignore[assignment]  # mutable-looking content: not hashable

    def __repr__(self) -> str:
        return (
            f"Call(call_id={self.call_id!r}, session_id={self.session_id!r}, seq={self.seq}, "
            f"prompt={self.prompt_ids.size} tokens, completion={self.completion_ids.size} "
            f"tokens, policy_version={self.policy_version}, flags={sorted(self.flags)})"
        )

    def to_record(self) -> dict[str, Any]:
        """The call as a record dict (lists, JSON-ready) that :meth:`from_record` reads back."""
        rec: dict[str, Any] = {
            "call_id": self.call_id,
            "session_id": self.session_id,
            "seq": self.seq,
            "prompt_ids": self.prompt_ids.tolist(),
            "completion_ids": self.completion_ids.tolist(),
            "completion_logprobs": self.completion_logprobs.tolist(),
            "policy_version": self.policy_version,
            "flags": sorted(self.flags),
            "metadata": self.metadata,
        }
        return rec

    @classmethod
    def from_records(
        cls, records: Iterable[Mapping[str, Any]], *, trainable_only: bool = True
    ) -> list[Call]:
        """The calls of a rollout's records, in order: the one way from records to the
        calls of a tree.

        With ``trainable_only`` (the default, for training) a record is kept only when
        :func:`is_trainable_record` holds; without it every record is kept (e.g. to draw
        what happened, failed calls included).

        Raises:
            InvalidCallError: a kept record is not a valid call (see :meth:`from_record`).
        """
        return [cls.from_record(r) for r in records if not trainable_only or is_trainable_record(r)]

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Call:
        """Build a call from a proxy call-record dict (docs/architecture.md, "Call record").

        Required keys: ``call_id``, ``session_id``, ``seq``, ``prompt_ids``,
        ``completion_ids``. Optional: ``completion_logprobs`` (``null`` only with an empty
        completion), ``policy_version`` (default 0; ``null``, as in the record of a failed
        call, reads as 0), ``flags`` (list of names, or a name→bool map), ``metadata``
        (dict). The record's ``run_id``, ``api``, ``model``, ``finish_reason``, ``spliced``,
        ``error``, ``prompt_relation``, ``policy_version_end``, ``sampling`` and ``timing``
        are copied into ``metadata`` (an explicit ``metadata`` dict wins on a key clash);
        request/response bodies are not kept.

        Raises:
            InvalidCallError: a required key is missing, or a value is invalid (see
                :class:`Call`).
        """
        if not isinstance(record, Mapping):
            raise InvalidCallError(f"a call record must be a mapping, got {type(record).__name__}")
        missing = [
            k
            for k in ("call_id", "session_id", "seq", "prompt_ids", "completion_ids")
            if k not in record
        ]
        if missing:
            raise InvalidCallError(
                f"call record {record.get('call_id', '?')!r} lacks required keys {missing}"
            )
        logprobs = record.get("completion_logprobs")
        if logprobs is None:
            if len(record["completion_ids"] or ()) != 0:
                raise InvalidCallError(
                    f"call record {record['call_id']!r} has completion_ids but no "
                    "completion_logprobs"
                )
            logprobs = []
        meta: dict[str, Any] = {k: record[k] for k in _METADATA_KEYS if k in record}
        extra = record.get("metadata")
        if extra is not None:
            if not isinstance(extra, Mapping):
                raise InvalidCallError(f"call record {record['call_id']!r}: metadata not a dict")
            meta.update(extra)
        pv = record.get("policy_version", 0)
        if isinstance(pv, float) and math.isfinite(pv) and pv.is_integer():
            pv = int(pv)
        return cls(
            call_id=record["call_id"],
            session_id=record["session_id"],
            seq=record["seq"],
            prompt_ids=_token_array(record["prompt_ids"], "prompt_ids", str(record["call_id"])),
            completion_ids=_token_array(
                record["completion_ids"] or [], "completion_ids", str(record["call_id"])
            ),
            completion_logprobs=_logprob_array(logprobs, str(record["call_id"])),
            policy_version=0 if pv is None else pv,
            flags=_flag_set(record.get("flags"), str(record["call_id"])),
            metadata=meta,
        )
