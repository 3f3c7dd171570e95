#!/bin/bash
set -euo pipefail
mkdir -p output
python3 - <<'EOF'
import csv, json
from datetime import datetime, timedelta
rows = list(csv.DictReader(open("readings.csv")))
sensors = sorted({r["sensor"] for r in rows})
start = datetime(2026, 11, 29, 0, 0)
expected = [(start + timedelta(minutes=5 * i)).strftime("%Y-%m-%dT%H:%M") for i in range(13)]
missing, means = {}, {}
for s in sensors:
    have = {r["timestamp"] for r in rows if r["sensor"] == s}
    missing[s] = [t for t in expected if t not in have]
    vals = [float(r["value"]) for r in rows if r["sensor"] == s and r["value"] != "NA"]
    means[s] = round(sum(vals) / len(vals), 2)
json.dump(missing, open("output/missing.json", "w"), indent=2)
json.dump(means, open("output/means.json", "w"), indent=2)
EOF
