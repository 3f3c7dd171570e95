#!/bin/bash
set -euo pipefail
cat > cart.js <<'EOF'
// Cart pricing rules: see the task; fixed implementation.
function subtotal(items) {
  let sum = 0;
  for (const it of items) sum += it.price * it.qty;
  return sum;
}

function cartTotal(items, coupon) {
  if (items.length === 0) return 0;
  let total = subtotal(items);
  if (coupon === "SAVE10") total = total * 0.9;
  if (coupon === "FLAT5") total = Math.max(0, total - 5);
  if (total < 50) total += 4.99;
  return Math.round(total * 100) / 100;
}

module.exports = { subtotal, cartTotal };
EOF
