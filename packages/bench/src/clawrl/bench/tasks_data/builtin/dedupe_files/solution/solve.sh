#!/bin/bash
set -euo pipefail
mkdir -p output
python3 - <<'EOF'
import hashlib, json, os
from pathlib import Path
groups = {}
for p in sorted(Path("photos").rglob("*")):
    if p.is_file():
        groups.setdefault(hashlib.sha256(p.read_bytes()).hexdigest(), []).append(str(p.relative_to("photos")))
dups = sorted(sorted(g) for g in groups.values() if len(g) > 1)
json.dump(dups, open("output/duplicates.json", "w"), indent=2)
for g in dups:
    for rel in g[1:]:
        os.remove(os.path.join("photos", rel))
EOF
