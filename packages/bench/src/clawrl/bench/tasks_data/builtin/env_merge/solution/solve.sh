#!/bin/bash
set -euo pipefail
python3 - <<'EOF'
env = {}
for name in ("config/.env.defaults", "config/.env.local"):
    for line in open(name):
        line = line.strip()
        if line and not line.startswith("#"):
            k, _, v = line.partition("=")
            env[k] = v
for k in env.pop("UNSET", "").split(","):
    env.pop(k.strip(), None)
open("config/.env", "w").write("".join(f"{k}={env[k]}\n" for k in sorted(env)))
EOF
