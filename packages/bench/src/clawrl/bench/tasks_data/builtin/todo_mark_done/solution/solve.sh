#!/bin/bash
set -euo pipefail
sed -i -e 's/^- \[ \] Send the invoice to ACME$/- [x] Send the invoice to ACME/' -e 's/^- \[ \] Book the meeting room$/- [x] Book the meeting room/' todo.md
