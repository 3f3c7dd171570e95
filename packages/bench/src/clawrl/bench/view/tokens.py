"""Token text for the viewer: one display string per token id, and the side-by-side token
diff of a diverged call against its parent.

Token ids decode through the run's own tokenizer (``clawrl.proxy.ChatRenderer``): a
byte-level vocabulary maps each id back to its bytes exactly; a BPE piece that is part of a
multi-byte character shows as U+FFFD. Without a tokenizer a token shows as ``⟨id⟩``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["TokenText", "token_diff"]

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")

#: Tokens shown on each side of a divergence point in the token diff.
DIFF_BEFORE = 24
DIFF_AFTER = 64


class TokenText:
    """Display text of token ids, cached per id.

    ``TokenText(model_dir)`` loads the model's tokenizer (``None`` or a failing load: ids
    are shown as ``⟨id⟩``). :meth:`table` gives the ``{id: text}`` map of the ids seen so
    far, for a rollout's data file.
    """

    def __init__(self, model_dir: Path | None) -> None:
        self._renderer: Any = None
        self._cache: dict[int, str] = {}
        if model_dir is not None:
            try:
                from clawrl.proxy import ChatRenderer

                self._renderer = ChatRenderer.from_model_dir(model_dir)
            except Exception:  # no tokenizer: show ids
                self._renderer = None

    @property
    def available(self) -> bool:
        """Whether a tokenizer decodes the ids."""
        return self._renderer is not None

    def text(self, token_id: int) -> str:
        """The display text of one token (control characters as U+FFFD, ``\\n`` kept)."""
        t = int(token_id)
        got = self._cache.get(t)
        if got is None:
            if self._renderer is None:
                got = f"⟨{t}⟩"
            else:
                try:
                    got = self._renderer.token_bytes(t).decode("utf-8", errors="replace")
                except Exception:
                    got = f"⟨{t}⟩"
                got = _CONTROL.sub("\ufffd", got)
            self._cache[t] = got
        return got

    def decode(self, ids: Sequence[int]) -> str:
        """Text of a run of ids (``""`` for none)."""
        if self._renderer is None:
            return "".join(self.text(i) for i in ids)
        try:
            return _CONTROL.sub("\ufffd", str(self._renderer.decode([int(i) for i in ids])))
        except Exception:
            return "".join(self.text(i) for i in ids)

    def table(self, ids: Sequence[int]) -> dict[str, str]:
        """``{str(id): text}`` for ``ids`` (each once)."""
        return {str(i): self.text(i) for i in dict.fromkeys(int(x) for x in ids)}


def token_diff(parent_ids: Sequence[int], child_ids: Sequence[int], at: int) -> dict[str, Any]:
    """The side-by-side token diff at a divergence point.

    ``parent_ids``: the parent call's prompt + completion; ``child_ids``: the diverged call's
    prompt; ``at``: the first index where they differ. Returns ``{"at", "start", "left",
    "right", "parent_len", "child_len"}`` where ``left`` / ``right`` are the ids from
    ``start = max(0, at - DIFF_BEFORE)`` to ``at + DIFF_AFTER`` on each side (tokens before
    ``at`` are shared context; from ``at`` on they are what the parent had and what the
    child has instead).
    """
    at = max(0, min(int(at), len(parent_ids), len(child_ids)))
    start = max(0, at - DIFF_BEFORE)
    return {
        "at": at,
        "start": start,
        "left": [int(t) for t in parent_ids[start : at + DIFF_AFTER]],
        "right": [int(t) for t in child_ids[start : at + DIFF_AFTER]],
        "parent_len": len(parent_ids),
        "child_len": len(child_ids),
    }
