#!/bin/bash
set -euo pipefail
mkdir -p output
python3 - <<'EOF'
import json, re
terms = {m.group(1): m.group(2).strip() for m in re.finditer(r"\*\*([^*]+)\*\*:\s*(.+)$", open("handbook.md").read(), re.M)}
json.dump(terms, open("output/glossary.json", "w"), indent=2)
md = ["# Glossary", ""]
for t in sorted(terms, key=str.lower):
    md += [f"## {t}", "", terms[t], ""]
open("output/glossary.md", "w").write("\n".join(md))
EOF
