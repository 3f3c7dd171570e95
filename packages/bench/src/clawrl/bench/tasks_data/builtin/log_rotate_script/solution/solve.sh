#!/bin/bash
set -euo pipefail
cat > rotate.sh <<'EOF'
#!/bin/bash
# Keep the N newest service-YYYY-MM-DD.log files in DIR (by the date in the name).
set -euo pipefail
dir=$1
keep=$2
find "$dir" -maxdepth 1 -type f -name '*.log' -printf '%f\n' | sort -r | tail -n +"$((keep + 1))" |
  while IFS= read -r name; do rm -f -- "$dir/$name"; done
EOF
chmod +x rotate.sh
./rotate.sh logs 3
