#!/bin/bash
set -euo pipefail
mkdir -p output
python3 - <<'EOF'
import json
deps = json.load(open("tasks.json"))
done, order = set(), []
while len(order) < len(deps):
    t = min(t for t in deps if t not in done and all(d in done for d in deps[t]))
    order.append(t); done.add(t)
open("output/order.txt", "w").write("\n".join(order) + "\n")
def needs(t, target):
    return any(d == target or needs(d, target) for d in deps[t])
open("output/blocked_by_schema.txt", "w").write("\n".join(sorted(t for t in deps if needs(t, "schema-migration"))) + "\n")
EOF
