#!/bin/bash
set -euo pipefail
mkdir -p output
python3 - <<'EOF'
import csv, json
totals = {}
with open("timesheet.csv", newline="") as fh:
    for row in csv.DictReader(fh):
        totals[row["person"]] = totals.get(row["person"], 0.0) + float(row["hours"])
json.dump({k: round(v, 2) for k, v in totals.items()}, open("output/totals.json", "w"), indent=2)
open("output/overtime.txt", "w").write("".join(f"{p}\n" for p in sorted(totals) if totals[p] > 40))
EOF
