#!/bin/bash
set -euo pipefail
mkdir -p output
python3 - <<'EOF'
import csv, json
rows = list(csv.DictReader(open("sales.csv")))
amounts = [float(r["amount"]) for r in rows]
by = {}
for r in rows:
    by[r["region"]] = by.get(r["region"], 0) + float(r["amount"])
json.dump({"count": len(rows), "total": round(sum(amounts), 2), "mean": round(sum(amounts) / len(amounts), 2),
           "max": round(max(amounts), 2), "best_region": max(by, key=by.get)}, open("output/summary.json", "w"))
EOF
