#!/bin/bash
set -euo pipefail
python3 - <<'EOF'
import json
d = json.load(open("team.json"))
d["members"] = [m for m in d["members"] if m["name"] != "Eve Adams"]
for m in d["members"]:
    if m["name"] == "Tom Baker":
        m["role"] = "lead"
d["members"].append({"name": "Priya Nair", "role": "engineer", "email": "priya@team.example"})
json.dump(d, open("team.json", "w"), indent=2)
EOF
