#!/bin/bash
set -euo pipefail
python3 - <<'EOF'
src = open("stats.py").read()
src = src.replace("    return values[len(values) // 2]\n", '''    xs = sorted(values)
    mid = len(xs) // 2
    if len(xs) % 2:
        return xs[mid]
    return (xs[mid - 1] + xs[mid]) / 2
''')
open("stats.py", "w").write(src)
EOF
