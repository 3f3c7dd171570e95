#!/bin/bash
set -euo pipefail
mkdir -p output
cat > output/query.sql <<'EOF'
SELECT p.category AS category,
       COUNT(DISTINCT l.order_id) AS orders,
       ROUND(COALESCE(SUM(l.qty * l.unit_price), 0), 2) AS revenue
FROM products p LEFT JOIN order_lines l ON l.product_id = p.id
GROUP BY p.category
ORDER BY revenue DESC;
EOF
