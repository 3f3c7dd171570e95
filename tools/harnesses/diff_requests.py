"""Show what changed between consecutive captured requests of each harness.

Prints, per fixture folder and per pair of consecutive model requests: top-level fields added,
removed or changed; whether the system prompt and the tools stayed identical; where the earlier
conversation stops being a prefix of the later one; and the items appended or rewritten. Used to
write the quirks section of packages/proxy/tests/fixtures/harness_requests/README.md.

    uv run python tools/harnesses/diff_requests.py [FOLDER ...]
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[2] / "packages/proxy/tests/fixtures/harness_requests"
CONVERSATION = {"chat-completions": "messages", "messages": "messages", "responses": "input"}


def _short(value: Any, n: int = 400) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= n else text[:n] + " …"


def paths_differing(a: Any, b: Any, path: str = "") -> list[str]:
    """JSON paths where ``a`` and ``b`` differ (added/removed keys, changed leaves/types)."""
    if type(a) is not type(b):
        return [f"{path or '.'}: {type(a).__name__} -> {type(b).__name__}"]
    if isinstance(a, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in b:
                out.append(f"{path}.{k}: removed")
            elif k not in a:
                out.append(f"{path}.{k}: added {_short(b[k], 80)}")
            else:
                out += paths_differing(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list):
        out = [f"{path}: length {len(a)} -> {len(b)}"] if len(a) != len(b) else []
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            out += paths_differing(x, y, f"{path}[{i}]")
        return out
    if a != b:
        return [f"{path or '.'}: {_short(a, 80)} -> {_short(b, 80)}"]
    return []


def diff_pair(api: str, a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    conv = CONVERSATION[api]
    out = []
    for key in sorted(set(a) | set(b)):
        if key == conv:
            continue
        if key not in b:
            out.append(f"  - field removed: {key}")
        elif key not in a:
            out.append(f"  - field added: {key} = {_short(b[key], 200)}")
        elif a[key] != b[key]:
            out.append(f"  - field changed: {key}: {_short(a[key], 200)} -> {_short(b[key], 200)}")
    ca, cb = a.get(conv) or [], b.get(conv) or []
    if isinstance(ca, str) or isinstance(cb, str):
        out.append(f"  - {conv} is a string")
        return out
    first = next((i for i, (x, y) in enumerate(zip(ca, cb, strict=False)) if x != y), None)
    if first is None and len(cb) >= len(ca):
        out.append(
            f"  - {conv}: earlier {len(ca)} items are an exact prefix; {len(cb) - len(ca)} appended"
        )
        for item in cb[len(ca) :]:
            out.append(f"      + {_short(item)}")
    else:
        first = len(cb) if first is None else first
        out.append(f"  - {conv}: diverges at item {first} of {len(ca)} (later has {len(cb)})")
        for i in range(first, max(len(ca), len(cb))):
            if i < len(ca) and i < len(cb):
                for line in paths_differing(ca[i], cb[i], f"[{i}]"):
                    out.append(f"      changed {line}")
                continue
            if i < len(ca):
                out.append(f"      was[{i}] {_short(ca[i])}")
            if i < len(cb):
                out.append(f"      now[{i}] {_short(cb[i])}")
    return out


def main(argv: list[str]) -> int:
    folders = [FIXTURES / f for f in argv] or sorted(p for p in FIXTURES.iterdir() if p.is_dir())
    for folder in folders:
        docs = []
        for path in sorted(folder.glob("*.json")):
            api = path.stem.split("-", 1)[1]
            if api in CONVERSATION:
                docs.append((path.name, api, json.loads(path.read_text())["body"]))
        print(f"## {folder.name}: {len(docs)} model requests")
        for (na, api, a), (nb, _, b) in itertools.pairwise(docs):
            print(f"- {na} -> {nb}")
            print("\n".join(diff_pair(api, a, b)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
