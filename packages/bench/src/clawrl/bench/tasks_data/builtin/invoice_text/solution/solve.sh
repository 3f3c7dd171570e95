#!/bin/bash
set -euo pipefail
mkdir -p output
python3 - <<'EOF'
import json
from decimal import Decimal, ROUND_HALF_UP
q = lambda x: Decimal(x).quantize(Decimal("0.01"), ROUND_HALF_UP)
o = json.load(open("order.json"))
out = [f"Invoice: {o['number']}", f"Customer: {o['customer']['name']}", ""]
sub = Decimal(0)
for it in o["items"]:
    total = q(Decimal(str(it["unit_price"])) * it["qty"])
    sub += total
    out.append(f"{it['description']} x{it['qty']} @ {q(str(it['unit_price']))} = {total}")
disc = q(sub * Decimal("0.1")) if sub > 500 else q(0)
tax = q((sub - disc) * Decimal(str(o["tax_rate"])))
out += ["", f"Subtotal: {q(sub)}", f"Discount: {disc}", f"Tax: {tax}", f"Total: {q(sub - disc + tax)}"]
open("output/invoice.txt", "w").write("\n".join(out) + "\n")
EOF
