#!/bin/bash
set -euo pipefail
mkdir -p output
python3 - <<'EOF'
import itertools, json
people = ["Ava", "Ben", "Cleo", "Dan"]
sols = []
for houses in itertools.permutations(range(1, 5)):
    h = dict(zip(people, houses))
    for pets in itertools.permutations(["cat", "dog", "fish", "parrot"]):
        p = dict(zip(people, pets))
        for drinks in itertools.permutations(["tea", "coffee", "juice", "water"]):
            d = dict(zip(people, drinks))
            at = {h[x]: x for x in people}
            fish = next(x for x in people if p[x] == "fish")
            if (h["Cleo"] == 1 and p[at[4]] == "dog" and d["Ben"] == "coffee" and d[at[2]] == "juice"
                    and h["Ava"] == h[fish] + 1 and all(p[x] == "parrot" for x in people if d[x] == "tea")
                    and p["Dan"] != "dog" and d["Cleo"] == "water" and h["Dan"] != 4 and p["Cleo"] != "cat"):
                sols.append({x: {"house": h[x], "pet": p[x], "drink": d[x]} for x in people})
assert len(sols) == 1, len(sols)
json.dump(sols[0], open("output/answer.json", "w"), indent=2)
EOF
