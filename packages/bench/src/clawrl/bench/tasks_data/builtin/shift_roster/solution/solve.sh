#!/bin/bash
set -euo pipefail
mkdir -p output
python3 - <<'EOF'
import json
staff = json.load(open("staff.json")); rules = json.load(open("rules.json"))
days, cap = rules["days"], rules["max_shifts"]
slots = [(d, s) for d in days for s in ("morning", "evening")]
def solve(i, plan, count):
    if i == len(slots):
        return plan
    d, s = slots[i]
    for p in sorted(staff):
        di = days.index(d)
        if d not in staff[p] or count.get(p, 0) >= cap:
            continue
        if s == "evening" and plan[(d, "morning")] == p:
            continue
        if s == "morning" and di > 0 and plan.get((days[di - 1], "evening")) == p:
            continue
        plan[(d, s)] = p; count[p] = count.get(p, 0) + 1
        r = solve(i + 1, plan, count)
        if r:
            return r
        del plan[(d, s)]; count[p] -= 1
    return None
plan = solve(0, {}, {})
json.dump({d: {"morning": plan[(d, "morning")], "evening": plan[(d, "evening")]} for d in days}, open("output/roster.json", "w"), indent=2)
EOF
