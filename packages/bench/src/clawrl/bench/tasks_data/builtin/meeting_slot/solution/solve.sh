#!/bin/bash
set -euo pipefail
mkdir -p output
python3 - <<'EOF'
import json
av = json.load(open("availability.json")); rules = json.load(open("rules.json"))
m = lambda s: int(s[:2]) * 60 + int(s[3:])
fmt = lambda x: f"{x // 60:02d}:{x % 60:02d}"
days = sorted({d for p in av.values() for d in p})
first, good = None, []
for day in days:
    busy = [tuple(map(m, iv.split("-"))) for p in av.values() for iv in p.get(day, [])]
    t = m(rules["work_start"])
    found = False
    while t + rules["minutes"] <= m(rules["work_end"]):
        if all(t + rules["minutes"] <= s or t >= e for s, e in busy):
            found = True
            if first is None:
                first = {"day": day, "start": fmt(t), "end": fmt(t + rules["minutes"])}
            break
        t += 15
    if found:
        good.append(day)
json.dump(first, open("output/slot.json", "w"))
open("output/days.txt", "w").write("\n".join(good) + "\n")
EOF
