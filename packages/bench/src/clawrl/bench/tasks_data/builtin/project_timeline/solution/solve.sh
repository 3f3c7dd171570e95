#!/bin/bash
set -euo pipefail
mkdir -p output
python3 - <<'EOF'
import csv
rows = list(csv.DictReader(open("milestones.csv")))
end = {}
def finish(r):
    if r["id"] not in end:
        deps = [d for d in r["depends_on"].split(";") if d]
        start = max((finish(next(x for x in rows if x["id"] == d)) for d in deps), default=0)
        end[r["id"]] = (start, start + int(r["duration_days"]))
    return end[r["id"]][1]
for r in rows:
    finish(r)
open("output/timeline.csv", "w").write("id,start,end\n" + "".join(f"{r['id']},{end[r['id']][0]},{end[r['id']][1]}\n" for r in rows))
open("output/duration.txt", "w").write(f"{max(e for _, e in end.values())}\n")
EOF
