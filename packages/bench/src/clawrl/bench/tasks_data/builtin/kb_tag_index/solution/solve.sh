#!/bin/bash
set -euo pipefail
mkdir -p output
python3 - <<'EOF'
import json, os, re
tags, untagged = {}, []
for name in sorted(os.listdir("notes")):
    text = open(os.path.join("notes", name)).read()
    m = re.match(r"---\n(.*?)\n---\n", text, re.S)
    t = re.search(r"^tags:\s*\[(.*)\]", m.group(1), re.M) if m else None
    if not t:
        untagged.append(name); continue
    for tag in t.group(1).split(","):
        tags.setdefault(tag.strip().lower(), []).append(name)
json.dump({k: sorted(v) for k, v in sorted(tags.items())}, open("output/tags.json", "w"), indent=2)
open("output/untagged.txt", "w").write("\n".join(untagged) + "\n")
EOF
