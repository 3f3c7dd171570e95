#!/bin/bash
set -euo pipefail
mkdir -p output
python3 - <<'EOF'
import json
from datetime import datetime, timedelta
ev = json.load(open("calendar.json"))
p = lambda s: datetime.fromisoformat(s)
out = []
for a in ev:
    for b in ev:
        if a["id"] < b["id"] and p(a["start"]) < p(b["end"]) and p(b["start"]) < p(a["end"]):
            out.append([a["id"], b["id"]])
json.dump(sorted(out), open("output/conflicts.json", "w"))
day_start, day_end = p("2026-12-01T09:00"), p("2026-12-01T17:00")
busy = sorted((p(e["start"]), p(e["end"])) for e in ev if e["start"].startswith("2026-12-01"))
slots, cur = [], day_start
for s, e in busy:
    if s > cur and s - cur >= timedelta(minutes=30):
        slots.append(f"{cur:%H:%M}-{s:%H:%M}")
    cur = max(cur, e)
if day_end - cur >= timedelta(minutes=30):
    slots.append(f"{cur:%H:%M}-{day_end:%H:%M}")
open("output/free_slots.txt", "w").write("\n".join(slots) + "\n")
EOF
