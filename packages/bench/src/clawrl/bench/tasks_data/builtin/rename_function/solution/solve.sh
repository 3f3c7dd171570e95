#!/bin/bash
set -euo pipefail
grep -rl --include='*.py' calc_total . | xargs sed -i 's/\bcalc_total\b/compute_total/g'
