"""The README example runs; the wheel installs alone with numpy + orjson only."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import clawrl.prefixtree
import pytest

PKG = Path(__file__).resolve().parents[1]
README = PKG / "README.md"


def readme_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "the README must start with a runnable python example"
    return blocks[0]


def test_readme_example_runs_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(readme_example(), str(README), "exec"), {"__name__": "__readme__"})
    out = capsys.readouterr().out
    assert "('c1',)" in out  # the retry was found as a dead leaf
    assert "[ 1  2  3 10 11  4 12 13 20]" in out


def test_public_names_are_exported() -> None:
    for name in clawrl.prefixtree.__all__:
        assert hasattr(clawrl.prefixtree, name), name
    assert clawrl.prefixtree.__version__ == "0.1.0"


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.mark.slow
def test_wheel_installs_into_an_empty_venv_and_runs_the_readme(tmp_path: Path) -> None:
    uv = shutil.which("uv")
    assert uv is not None, "uv must be on PATH (tools/setup.sh installs it)"
    root = PKG.parents[1]
    env = {
        k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")
    }
    dist = tmp_path / "dist"
    _run([uv, "build", "--package", "clawrl-prefixtree", "--out-dir", str(dist)], root, env)
    wheels = list(dist.glob("clawrl_prefixtree-*.whl"))
    assert len(wheels) == 1, list(dist.iterdir())
    venv = tmp_path / "venv"
    py_version = f"{sys.version_info.major}.{sys.version_info.minor}"
    _run([uv, "venv", "--python", py_version, str(venv)], tmp_path, env)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    _run([uv, "pip", "install", "--python", str(python), str(wheels[0])], tmp_path, env)
    listed = json.loads(
        _run([uv, "pip", "list", "--python", str(python), "--format", "json"], tmp_path, env)
    )
    names = {p["name"].lower().replace("_", "-") for p in listed}
    assert names == {"clawrl-prefixtree", "numpy", "orjson"}, names
    script = tmp_path / "readme_example.py"
    script.write_text(readme_example())
    out = _run([str(python), str(script)], tmp_path, env)  # outside the workspace
    assert "('c1',)" in out
    # the installed package is the wheel's, not the workspace source
    where = _run(
        [str(python), "-c", "import clawrl.prefixtree as m; print(m.__file__)"], tmp_path, env
    )
    assert str(venv) in where
