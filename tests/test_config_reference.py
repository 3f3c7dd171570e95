"""docs/config-reference.md is what tools/gen_config_reference.py writes from today's code."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tool():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "gen_config_reference", ROOT / "tools" / "gen_config_reference.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_config_reference_is_current() -> None:
    tool = _tool()
    committed = (ROOT / "docs" / "config-reference.md").read_text()
    assert committed == tool.render(), (
        "docs/config-reference.md is stale: run `uv run python tools/gen_config_reference.py`"
    )


def test_config_reference_lists_every_key() -> None:
    """Every key of the three configurations appears with a meaning."""
    from clawrl.bench.config import BenchConfig
    from clawrl.rl_core.train import TrainConfig

    text = _tool().render()
    flat = TrainConfig().to_dict()
    for section, table in flat.items():
        assert f"### [{section}]" in text
        for key in table:
            assert f"| `{key}` |" in text, f"[{section}] {key} is missing"
    for key in BenchConfig.model_fields:
        assert f"| `{key}` |" in text, f"bench {key} is missing"
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    undocumented = [line.split("|")[1].strip() for line in rows if line.endswith("| — |")]
    assert not undocumented, f"keys without a meaning: {undocumented}"
