"""The benchmark scripts under tools/perf/ keep running (their figures are not asserted:
performance is measured in benchmarks, not timed tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_prefixtree_benchmark_runs_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "prefixtree.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools/perf/bench_prefixtree.py"),
            "--repeat",
            "2",
            "--group",
            "2",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    text = json.dumps(result)
    assert "compression" in text


@pytest.mark.slow
def test_sglang_vs_embedded_runs_the_embedded_side_and_rejects_bad_engines(
    tmp_path: Path,
) -> None:
    """The side-by-side benchmark on a tiny model, embedded fp32 only (SGLang needs its own
    environment): every figure and roofline ratio is written, and an fp32 engine's
    recorded logprobs match the fp32 trainer's recompute to float32 rounding."""
    from clawrl.proxy import build_default_model

    model = build_default_model("qwen3")
    out = tmp_path / "side.json"
    script = str(ROOT / "tools/perf/bench_sglang_vs_embedded.py")
    common = ["--model", str(model), "--out", str(out), "--log-dir", str(tmp_path)]
    small = ["--prompt", "32", "--decode-prompt", "8", "--tokens", "3", "--mismatch-tokens", "4"]
    proc = subprocess.run(
        [sys.executable, script, *common, *small, "--engines", "embedded:fp32"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    (case,) = result["cases"]
    assert (case["engine"], case["dtype"]) == ("embedded", "fp32")
    for key in (
        "start_s",
        "prefill_tok_s",
        "prefill_over_roofline",
        "decode_b1_over_bound",
        "decode_b8_over_bound",
    ):
        assert case[key] > 0, key
    fp32 = case["mismatch"]["trainer_fp32"]
    assert fp32["tokens"] == 8 * 4
    assert fp32["max_abs"] < 1e-3
    assert len(result["roofline"]["measurements"]) == 2  # before the engine, after the last
    assert "| embedded | fp32 |" in proc.stdout

    bad = subprocess.run(
        [sys.executable, script, *common, "--engines", "vllm:fp32"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr
    assert "--engines" in bad.stderr


@pytest.mark.slow
def test_serving_contexts_compares_in_place_appends_with_concatenation(tmp_path: Path) -> None:
    """``bench_serving.py --contexts`` on a tiny model: both modes decode and are written with
    their bound and ratio."""
    from clawrl.proxy import build_default_model

    model = build_default_model("qwen3")
    out = tmp_path / "contexts.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools/perf/bench_serving.py"), "--model", str(model),
         "--contexts", "200,40", "--tokens", "6", "--threads", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    cases = json.loads(out.read_text())["contexts"]
    assert [c["mode"] for c in cases] == ["in_place", "concatenate"]
    for c in cases:
        assert c["decode_tok_s"] > 0 and c["decode_over_bound"] > 0 and c["kv_bytes"] > 0
    assert cases[0]["speedup_over_concatenate"] > 0


@pytest.mark.slow
def test_harness_update_benchmark_compares_the_tree_with_flat_sequences(tmp_path: Path) -> None:
    """One tiny shared prompt, both modes: the tree holds the prompt once (token ratio
    (G·(P+L)) / (P+G·L)), and every figure and roofline ratio is written."""
    out = tmp_path / "harness_update.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools/perf/bench_harness_update.py"),
            *("--prompts", "200", "--layers", "1", "--branch-tokens", "20", "--out", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["tree"]["tokens"] == 200 + 4 * 20 and row["flat"]["tokens"] == 4 * 220
    assert row["token_ratio"] == pytest.approx(880 / 280)
    for mode in ("tree", "flat"):
        assert row[mode]["ratio_to_bf16_roofline"] > 0 and row[mode]["peak_rss_bytes"] > 0
