#!/bin/bash
set -euo pipefail
mkdir -p output
python3 - <<'EOF'
import csv
rows = []
for r in csv.DictReader(open("grades.csv")):
    v = lambda k: float(r[k] or 0)
    final = round(0.25 * v("hw1") + 0.25 * v("hw2") + 0.5 * v("exam"), 1)
    letter = next((l for t, l in ((90, "A"), (80, "B"), (70, "C"), (60, "D")) if final >= t), "F")
    rows.append((r["student"], final, letter))
rows.sort(key=lambda x: (-x[1], x[0]))
with open("output/report.csv", "w") as fh:
    fh.write("student,final,letter\n")
    for s, f, l in rows:
        fh.write(f"{s},{f:.1f},{l}\n")
EOF
