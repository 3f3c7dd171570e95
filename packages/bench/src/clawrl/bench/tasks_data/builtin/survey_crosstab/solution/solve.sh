#!/bin/bash
set -euo pipefail
mkdir -p output
python3 - <<'EOF'
import csv
syn = {"y": "yes", "yes": "yes", "n": "no", "no": "no", "unsure": "unsure", "not sure": "unsure", "?": "unsure"}
last = {}
for r in csv.DictReader(open("survey.csv")):
    last[r["id"]] = r
counts = {}
for r in last.values():
    a = r["answer"].strip().lower()
    if not a:
        continue
    reg = r["region"].strip().lower()
    counts.setdefault(reg, {"yes": 0, "no": 0, "unsure": 0})[syn[a]] += 1
cols = ["yes", "no", "unsure"]
lines = ["region,yes,no,unsure,total"]
tot = [0, 0, 0]
for reg in sorted(counts):
    vals = [counts[reg][c] for c in cols]
    tot = [a + b for a, b in zip(tot, vals)]
    lines.append(",".join([reg, *map(str, vals), str(sum(vals))]))
lines.append(",".join(["all", *map(str, tot), str(sum(tot))]))
open("output/crosstab.csv", "w").write("\n".join(lines) + "\n")
EOF
