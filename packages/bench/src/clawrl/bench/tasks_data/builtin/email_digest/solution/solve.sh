#!/bin/bash
set -euo pipefail
mkdir -p output
python3 - <<'EOF'
import json, os, re
items = []
for name in sorted(os.listdir("inbox")):
    text = open(os.path.join("inbox", name)).read()
    head, _, body = text.partition("\n\n")
    h = dict(line.split(": ", 1) for line in head.splitlines())
    items.append({"file": name, "from": h["From"], "subject": h["Subject"], "date": h["Date"],
                  "urgent": bool(re.search(r"\burgent\b", h["Subject"] + " " + body, re.I))})
items.sort(key=lambda e: e["date"], reverse=True)
json.dump([{k: e[k] for k in ("file", "from", "subject", "date")} for e in items],
          open("output/digest.json", "w"), indent=2)
open("output/urgent.txt", "w").write("".join(e["file"] + "\n" for e in items if e["urgent"]))
EOF
