#!/bin/bash
set -euo pipefail
mkdir -p output
python3 - <<'EOF'
import csv, json
cust = {r["customer_id"]: r for r in csv.DictReader(open("customers.csv"))}
rev = {}
for o in csv.DictReader(open("orders.csv")):
    if o["status"] == "paid":
        rev[o["customer_id"]] = rev.get(o["customer_id"], 0) + float(o["amount"])
top = sorted(rev, key=rev.get, reverse=True)[:3]
json.dump([{"name": cust[c]["name"], "country": cust[c]["country"], "revenue": round(rev[c], 2)} for c in top],
          open("output/top3.json", "w"), indent=2)
none = sorted(c["name"] for k, c in cust.items() if k not in rev)
open("output/no_orders.txt", "w").write("\n".join(none) + "\n")
EOF
