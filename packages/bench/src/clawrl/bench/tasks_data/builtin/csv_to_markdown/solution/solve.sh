#!/bin/bash
set -euo pipefail
mkdir -p output
python3 - <<'EOF'
import csv
rows = list(csv.reader(open("products.csv")))
out = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
for r in rows[1:]:
    r[2] = f"${float(r[2]):.2f}"
    out.append("| " + " | ".join(r) + " |")
open("output/products.md", "w").write("\n".join(out) + "\n")
EOF
