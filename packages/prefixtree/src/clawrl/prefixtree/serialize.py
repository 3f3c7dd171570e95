"""Storing and reloading prefix trees (orjson).

The format stores the tree itself — each unique token once — not the flat calls:

```
{"format": "clawrl.prefixtree", "version": 1,
 "rollouts": [{"rollout_id", "metadata", "flags"}],
 "nodes": [{"parent": int (-1 = root), "tokens": [int],
            "obs": [{"call_id", "start", "policy_version", "logprobs": [float]}]}],
 "calls": [{"call_id", "session_id", "seq", "rollout_id", "prompt_len", "completion_len",
            "policy_version", "flags", "metadata", "end": node index}]}
```

Nodes are in DFS order (a parent before its children); logprobs are written with orjson's
shortest round-trip float representation, so a reload is bit-exact.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
from clawrl.prefixtree.errors import PrefixTreeError, SerializationError
from clawrl.prefixtree.tree import (
    InvariantError,
    Node,
    Observation,
    PrefixTree,
    RolloutInfo,
    _CallEntry,
)

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "dumps", "loads"]

FORMAT_NAME = "clawrl.prefixtree"
FORMAT_VERSION = 1


def dumps(tree: PrefixTree) -> bytes:
    """Serialize ``tree`` to JSON bytes (orjson).

    Raises:
        SerializationError: call or rollout metadata is not JSON-serializable.
    """
    nodes = list(tree.nodes())
    index = {id(n): k for k, n in enumerate(nodes)}
    doc: dict[str, Any] = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "rollouts": [
            {"rollout_id": r.rollout_id, "metadata": r.metadata, "flags": sorted(r.flags)}
            for r in tree._rollouts.values()
        ],
        "nodes": [
            {
                "parent": index.get(id(n.parent), -1),
                "tokens": n.tokens,
                "obs": [
                    {
                        "call_id": o.call_id,
                        "start": o.start,
                        "policy_version": o.policy_version,
                        "logprobs": np.ascontiguousarray(o.logprobs),
                    }
                    for o in n.obs.values()
                ],
            }
            for n in nodes
        ],
        "calls": [
            {
                "call_id": e.call_id,
                "session_id": e.session_id,
                "seq": e.seq,
                "rollout_id": e.rollout_id,
                "prompt_len": e.prompt_len,
                "completion_len": e.completion_len,
                "policy_version": e.policy_version,
                "flags": sorted(e.flags),
                "metadata": e.metadata,
                "end": index[id(e.end)],
            }
            for e in tree._calls.values()
        ],
    }
    try:
        return orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)
    except TypeError as exc:
        raise SerializationError(f"tree is not JSON-serializable: {exc}") from exc


def loads(data: bytes | str) -> PrefixTree:
    """Rebuild a tree written by :func:`dumps`; checks every tree invariant.

    Raises:
        SerializationError: not JSON, wrong format name/version, missing fields, or data
            that breaks a tree invariant.
    """
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise SerializationError(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME:
        raise SerializationError(f"not a {FORMAT_NAME} document")
    if doc.get("version") != FORMAT_VERSION:
        raise SerializationError(f"unsupported format version {doc.get('version')!r}")
    try:
        return _build(doc)
    except SerializationError:
        raise
    except (InvariantError, PrefixTreeError, KeyError, TypeError, ValueError, IndexError) as exc:
        raise SerializationError(f"invalid {FORMAT_NAME} document: {exc!r}") from exc


def _build(doc: dict[str, Any]) -> PrefixTree:
    tree = PrefixTree()
    root = tree.root
    built: list[Node] = []
    for k, nd in enumerate(doc["nodes"]):
        p = int(nd["parent"])
        if not -1 <= p < k:
            raise SerializationError(f"node {k}: parent {p} does not precede it")
        parent = root if p < 0 else built[p]
        tokens = np.asarray(nd["tokens"], dtype=np.int64)
        if tokens.ndim != 1 or tokens.size == 0:
            raise SerializationError(f"node {k}: empty or malformed tokens")
        tokens.flags.writeable = False
        node = Node(tokens, parent, parent.end_depth)
        key = int(tokens[0])
        if key in parent.children:
            raise SerializationError(f"node {k}: two children start with token {key}")
        parent.children[key] = node
        for o in nd["obs"]:
            lp = np.asarray(o["logprobs"], dtype=np.float64)
            lp.flags.writeable = False
            node.obs[str(o["call_id"])] = Observation(
                str(o["call_id"]), int(o["start"]), lp, int(o["policy_version"])
            )
        built.append(node)
    for r in doc["rollouts"]:
        rid = str(r["rollout_id"])
        tree._rollouts[rid] = RolloutInfo(rid, dict(r["metadata"]), frozenset(r["flags"]))
    for c in doc["calls"]:
        cid = str(c["call_id"])
        if cid in tree._calls:
            raise SerializationError(f"call {cid!r} appears twice")
        end = built[int(c["end"])]
        end.ends.add(cid)
        tree._calls[cid] = _CallEntry(
            call_id=cid,
            session_id=str(c["session_id"]),
            seq=int(c["seq"]),
            rollout_id=str(c["rollout_id"]),
            prompt_len=int(c["prompt_len"]),
            completion_len=int(c["completion_len"]),
            policy_version=int(c["policy_version"]),
            flags=frozenset(str(f) for f in c["flags"]),
            metadata=dict(c["metadata"]),
            end=end,
        )
    tree.check_invariants()
    return tree
