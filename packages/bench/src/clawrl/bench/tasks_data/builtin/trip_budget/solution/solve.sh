#!/bin/bash
set -euo pipefail
mkdir -p output
python3 - <<'EOF'
import json
ex = json.load(open("expenses.json")); rates = json.load(open("rates.json"))
cats = {}
for e in ex:
    cats[e["category"]] = cats.get(e["category"], 0) + e["amount"] * rates[e["currency"]]
total = sum(cats.values())
json.dump({"by_category": {k: round(v, 2) for k, v in cats.items()}, "total_eur": round(total, 2),
           "within_budget": total <= rates["budget_eur"]}, open("output/budget.json", "w"), indent=2)
EOF
