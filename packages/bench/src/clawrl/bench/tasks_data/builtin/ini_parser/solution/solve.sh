#!/bin/bash
set -euo pipefail
cat > iniparse.py <<'EOF'
"""A tiny INI parser."""


class IniError(ValueError):
    """Raised for malformed input; the message contains `line N` (1-based)."""


def parse_ini(text: str) -> dict[str, dict[str, str]]:
    """Parse INI `text` into {section: {key: value}} (see the task for the rules)."""
    result: dict[str, dict[str, str]] = {}
    section = ""
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            if not line.endswith("]"):
                raise IniError(f"line {n}: unterminated section header")
            section = line[1:-1].strip()
            result.setdefault(section, {})
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut <= 0:
            raise IniError(f"line {n}: expected key = value")
        result.setdefault(section, {})[line[:cut].strip().lower()] = line[cut + 1:].strip()
    return result
EOF
