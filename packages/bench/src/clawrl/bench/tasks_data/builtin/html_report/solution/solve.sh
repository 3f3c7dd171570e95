#!/bin/bash
set -euo pipefail
mkdir -p output
python3 - <<'EOF'
import html, json
runs = sorted(json.load(open("results.json")), key=lambda r: r["latency_ms"])
rows = "".join(f"<tr><td>{html.escape(r['name'])}</td><td>{r['latency_ms']}</td><td>{'PASS' if r['passed'] else 'FAIL'}</td></tr>\n" for r in runs)
n = sum(r["passed"] for r in runs)
doc = f'''<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Benchmark report</title></head>
<body><h1>Benchmark report</h1>
<table id="runs"><tr><th>Name</th><th>Latency (ms)</th><th>Status</th></tr>
{rows}</table>
<p id="summary">{n} of {len(runs)} runs passed</p>
</body></html>
'''
open("output/report.html", "w").write(doc)
EOF
