#!/bin/bash
set -euo pipefail
python3 - <<'EOF'
import re
text = open("README.md").read()
heads = re.findall(r"^## (.+)$", text, re.M)
def anchor(h):
    return re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
toc = "\n".join(f"- [{h}](#{anchor(h)})" for h in heads)
open("README.md", "w").write(text.replace("<!-- toc -->", toc, 1))
EOF
