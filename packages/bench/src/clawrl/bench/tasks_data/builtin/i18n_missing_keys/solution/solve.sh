#!/bin/bash
set -euo pipefail
mkdir -p output
python3 - <<'EOF'
import json
en = json.load(open("locales/en.json"))
de = json.load(open("locales/de.json", encoding="utf-8"))
missing = []
def walk(src, dst, prefix):
    for k, v in src.items():
        if isinstance(v, dict):
            walk(v, dst.setdefault(k, {}), prefix + k + ".")
        elif k not in dst:
            dst[k] = "TODO: " + v
            missing.append(prefix + k)
walk(en, de, "")
open("output/missing.txt", "w").write("\n".join(sorted(missing)) + "\n")
json.dump(de, open("locales/de.json", "w", encoding="utf-8"), ensure_ascii=False, indent=2)
EOF
