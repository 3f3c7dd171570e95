#!/bin/bash
set -euo pipefail
mkdir -p output
python3 - <<'EOF'
import csv
books = sorted((b for b in csv.DictReader(open("books.csv")) if b["topic"] == "distributed systems"), key=lambda b: int(b["year"]))
out = [f"{i}. {b['title']} — {b['author']} ({b['year']})" for i, b in enumerate(books, 1)]
out.append(f"Total pages: {sum(int(b['pages']) for b in books)}")
open("output/plan.md", "w").write("\n".join(out) + "\n")
EOF
