#!/bin/bash
set -euo pipefail
mkdir -p output
python3 - <<'EOF'
import json
r = json.load(open("recipe.json"))
f = 6 / r["servings"]
r["servings"] = 6
for i in r["ingredients"]:
    if i["unit"] not in ("pinch", "to taste"):
        i["amount"] = round(i["amount"] * f, 2)
json.dump(r, open("output/recipe_6.json", "w"), indent=2)
EOF
