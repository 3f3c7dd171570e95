#!/bin/bash
set -euo pipefail
mkdir -p output
python3 - <<'EOF'
import csv
merged = {}
for name in ("contacts_a.csv", "contacts_b.csv"):
    with open(name, newline="") as fh:
        for row in csv.DictReader(fh):
            row["email"] = row["email"].lower()
            old = merged.get(row["email"])
            if old and not row["phone"]:
                row["phone"] = old["phone"]
            merged[row["email"]] = row
with open("output/contacts.csv", "w", newline="") as fh:
    w = csv.DictWriter(fh, ["name", "email", "phone"], lineterminator="\n")
    w.writeheader()
    for email in sorted(merged):
        w.writerow(merged[email])
EOF
