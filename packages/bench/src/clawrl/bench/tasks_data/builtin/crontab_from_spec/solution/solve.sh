#!/bin/bash
set -euo pipefail
cat > crontab.txt <<'EOF'
30 2 * * * /opt/bin/backup.sh
*/15 * * * * /opt/bin/healthcheck
0 6 * * 1-5 /opt/bin/report --daily
0 0 1 * * /opt/bin/invoice
45 23 * * 0 /opt/bin/cleanup /tmp
EOF
