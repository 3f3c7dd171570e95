#!/bin/bash
set -euo pipefail
mkdir -p output
awk '{c[$2]++} END {printf "{\"DEBUG\": %d, \"INFO\": %d, \"WARN\": %d, \"ERROR\": %d}\n", c["DEBUG"], c["INFO"], c["WARN"], c["ERROR"]}' logs/app.log > output/levels.json
awk '$2 == "ERROR" {sub(":", "", $3); print $3}' logs/app.log | sort -u > output/error_components.txt
