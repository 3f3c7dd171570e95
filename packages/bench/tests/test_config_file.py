"""The configuration-file reader shared by bench, train and synth."""

from __future__ import annotations

from pathlib import Path

import pytest
from clawrl.bench import parse_override_value, read_config_file


class MyError(Exception):
    pass


def test_reads_toml_and_saved_json(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text('[run]\nsteps = 3\nname = "x"\n')
    (tmp_path / "b.json").write_text('{"run": {"steps": 4}}')
    assert read_config_file(tmp_path / "a.toml") == {"run": {"steps": 3, "name": "x"}}
    assert read_config_file(tmp_path / "b.json") == {"run": {"steps": 4}}


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        ("missing.toml", None, "cannot read config"),
        ("bad.toml", "[run\nsteps = ", "bad.toml"),
        ("bad.json", "{", "bad.json"),
        ("list.json", "[1, 2]", "not a table"),
        ("binary.toml", b"\xff\xfe\x00", "cannot read config"),
    ],
)
def test_bad_files_raise_the_callers_error_naming_the_file(
    tmp_path: Path, name: str, text: str | bytes | None, match: str
) -> None:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    elif text is not None:
        path.write_text(text)
    with pytest.raises(MyError, match=match):
        read_config_file(path, MyError)


@pytest.mark.parametrize(
    ("raw", "value"),
    [("3", 3), ("0.5", 0.5), ("true", True), ("[1, 2]", [1, 2]), ('"a b"', "a b")],
)
def test_override_values_parse_as_toml(raw: str, value: object) -> None:
    assert parse_override_value(raw) == value


def test_override_values_that_are_not_toml_stay_strings() -> None:
    assert parse_override_value("runs/out") == "runs/out"
    assert parse_override_value("qwen3") == "qwen3"


def test_config_flags_collect_overrides_in_order() -> None:
    import argparse

    from clawrl.bench import add_config_flags

    p = argparse.ArgumentParser()
    add_config_flags(p, config_help="c", set_metavar="K=V", set_help="s")
    args = p.parse_args(["--config", "a.toml", "--set", "x.y=1", "--set", "x.y=2"])
    assert (args.config, args.overrides) == ("a.toml", ["x.y=1", "x.y=2"])
    assert p.parse_args([]).overrides == []
