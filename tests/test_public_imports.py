"""Packages use each other, and tools/ uses them, only through their public API: a package's
root (``clawrl.<pkg>``) or one of its declared public subpackages, never another module
inside it ("no import of a private module across packages or from tools/")."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "sandbox": "sandbox",
    "proxy": "proxy",
    "prefixtree": "prefixtree",
    "rl-core": "rl_core",
    "ise-synth": "ise_synth",
    "bench": "bench",
}
#: public subpackages and modules, documented in their package README (``testing``: the
#: stand-ins a package offers its users' tests, named as such)
PUBLIC_SUBPACKAGES = {
    "clawrl.bench.harness",
    "clawrl.bench.tasks",
    "clawrl.rl_core.train",
    "clawrl.proxy.testing",
    "clawrl.ise_synth.testing",
}


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
    return names


def _violations(files: list[Path], own: str | None) -> list[str]:
    bad = []
    for path in files:
        if "tasks_data" in path.parts:
            continue
        for module in _imports(path):
            parts = module.split(".")
            if parts[0] != "clawrl" or len(parts) < 3 or parts[1] == own:
                continue
            if ".".join(parts[:3]) in PUBLIC_SUBPACKAGES and len(parts) == 3:
                continue
            bad.append(f"{path}: {module}")
    return bad


def test_packages_import_each_other_only_through_public_modules() -> None:
    bad = []
    for folder, name in PACKAGES.items():
        files = sorted((ROOT / "packages" / folder / "src").rglob("*.py"))
        assert files, folder
        bad += _violations(files, own=name)
    assert bad == []


def test_tools_import_clawrl_only_through_public_modules() -> None:
    files = sorted((ROOT / "tools").rglob("*.py"))
    assert files
    assert _violations(files, own=None) == []


def test_the_scan_sees_a_private_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("from clawrl.proxy.backends.base import SamplingParams\nimport clawrl.bench\n")
    assert _violations([probe], own=None) == [f"{probe}: clawrl.proxy.backends.base"]
