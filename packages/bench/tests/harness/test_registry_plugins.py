"""Harnesses brought by the user: an import path ``module:attribute`` (from ``sys.path`` or
the current folder) and an entry point of the group ``clawrl.harnesses`` of an installed
distribution; a bad one is one ``UnknownHarnessError`` naming it."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from clawrl.bench.harness import (
    HARNESS_ENTRY_POINT_GROUP,
    HarnessAdapter,
    UnknownHarnessError,
    get_harness,
    harness_names,
    register_harness,
)

MODULE = """
from clawrl.bench.harness import HarnessAdapter, HarnessLaunch


class Named(HarnessAdapter):
    name = "my-named"
    needs_model = False

    def launch(self, ctx):
        return HarnessLaunch(argv=("true",))


class Unnamed(Named):
    name = ""


def make():
    return Named()


INSTANCE = Named()
NOT_A_HARNESS = 42


def makes_a_string():
    return "no"
"""


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder holding ``byo_plugin_mod.py`` (importable once on ``sys.path``)."""
    (tmp_path / "byo_plugin_mod.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.delitem(sys.modules, "byo_plugin_mod", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))  # restored after the test
    return tmp_path


def test_an_import_path_from_the_current_folder(
    plugin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(plugin_dir)
    if "" in sys.path:
        sys.path.remove("")
    h = get_harness("byo_plugin_mod:Named")
    assert isinstance(h, HarnessAdapter) and h.name == "my-named"
    assert get_harness("byo_plugin_mod:make").name == "my-named"  # a factory
    assert get_harness("byo_plugin_mod:INSTANCE").name == "my-named"  # an instance
    # an adapter without a name takes the import path as its name
    assert get_harness("byo_plugin_mod:Unnamed").name == "byo_plugin_mod:Unnamed"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module_xyz:Cls", r"harness 'no_such_module_xyz:Cls': cannot import"),
        ("byo_plugin_mod:Missing", r"harness 'byo_plugin_mod:Missing': byo_plugin_mod has no"),
        ("byo_plugin_mod:NOT_A_HARNESS", r"is a int, not a HarnessAdapter subclass"),
        ("byo_plugin_mod:makes_a_string", r"made a str, not a HarnessAdapter"),
        (":Cls", r"an import path is 'module:attribute'"),
        ("refrence", r"unknown harness 'refrence'; known: .*reference.*import path"),
    ],
)
def test_a_bad_harness_is_one_error_naming_it(plugin_dir: Path, spec: str, message: str) -> None:
    sys.path.insert(0, str(plugin_dir))
    with pytest.raises(UnknownHarnessError, match=message) as info:
        get_harness(spec)
    assert isinstance(info.value, ValueError) and "\n" not in str(info.value)


def test_an_entry_point_of_an_installed_distribution(plugin_dir: Path) -> None:
    """A distribution on ``sys.path`` (its ``.dist-info`` as an installer writes it) whose
    entry point in ``clawrl.harnesses`` names the harness."""
    info = plugin_dir / "byo_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: byo-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        f"[{HARNESS_ENTRY_POINT_GROUP}]\nbyo-named = byo_plugin_mod:Named\n"
        "byo-broken = byo_plugin_mod:Missing\n"
    )
    assert "byo-named" not in harness_names()
    sys.path.insert(0, str(plugin_dir))
    assert {"byo-named", "byo-broken", "reference"} <= set(harness_names())
    assert get_harness("byo-named").name == "my-named"
    with pytest.raises(UnknownHarnessError, match=r"harness 'byo-broken': loading entry point"):
        get_harness("byo-broken")


def test_register_harness(plugin_dir: Path) -> None:
    sys.path.insert(0, str(plugin_dir))
    from byo_plugin_mod import Named  # type: ignore[import-not-found]

    register_harness("byo-registered", Named)
    try:
        assert get_harness("byo-registered").name == "my-named"
        assert "byo-registered" in harness_names()
        with pytest.raises(ValueError, match="already registered"):
            register_harness("byo-registered", Named)
        with pytest.raises(ValueError, match="import paths"):
            register_harness("a:b", Named)
    finally:
        from clawrl.bench.harness import registry

        registry._REGISTRY.pop("byo-registered", None)
