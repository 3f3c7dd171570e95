#!/bin/bash
set -euo pipefail
mkdir -p output
{ echo "owner,task"; sed -n 's/^ACTION: @\([a-z]*\) \(.*\)$/\1,\2/p' notes/meeting.md | sed 's/[[:space:]]*$//'; } > output/actions.csv
