#!/bin/bash
set -euo pipefail
python3 - <<'EOF'
src = open("textutil.py").read()
src = src.replace("    raise NotImplementedError\n", '''    import re
    import unicodedata

    norm = unicodedata.normalize("NFKD", text)
    ascii_text = "".join(c for c in norm if not unicodedata.combining(c))
    return re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")
''')
open("textutil.py", "w").write(src)
EOF
