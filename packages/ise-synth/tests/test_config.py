"""``synth``'s config file, ``--set`` overrides, flags over both, and the saved resolved config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clawrl.ise_synth.cli import _parser, main
from clawrl.ise_synth.config import resolve_args, resolved_config
from clawrl.ise_synth.errors import IseSynthError

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "ise_synth.toml"


def _resolve(argv: list[str]):  # type: ignore[no-untyped-def]
    parser, commands = _parser()
    return resolve_args(parser, commands, argv)


def _defaults(command: str, *required: str) -> dict[str, object]:
    return resolved_config(_resolve([command, *required]))[command]


def test_file_then_set_then_flags(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[simulate]\nintents = "i.jsonl"\nout = "o"\nmax_user_turns = 5\n'
        'simulator = "scripted"\nagent_timeout = 30\nconcurrency = 2\n'
        "[run]\nnum = 7\n"
    )
    a = _resolve(["simulate", "--config", str(cfg)])
    assert (a.intents, a.out, a.max_user_turns, a.simulator) == (
        Path("i.jsonl"),
        Path("o"),
        5,
        "scripted",
    )
    assert a.agent_timeout == 30.0 and isinstance(a.agent_timeout, float)
    assert a.agent == "embedded" and a.memory_mb == 1024  # the flags' defaults elsewhere
    b = _resolve(
        [
            "simulate",
            "--config",
            str(cfg),
            "--set",
            "max_user_turns=6",
            "--set",
            "simulate.concurrency=3",
        ]
    )
    assert (b.max_user_turns, b.concurrency) == (6, 3)
    c = _resolve(
        ["simulate", "--config", str(cfg), "--set", "max_user_turns=6", "--max-user-turns", "9"]
    )
    assert c.max_user_turns == 9  # a flag wins over the file and --set
    assert _resolve(["run", "--config", str(cfg), "-o", "r"]).num == 7


def test_no_file_is_the_flags_defaults() -> None:
    plain = _resolve(["run", "-o", "x"])
    assert plain.num == 20 and plain.embedding == "tfidf" and plain.agent_max_turns == 20
    assert _defaults("run", "-o", "x") == resolved_config(plain)["run"]


@pytest.mark.parametrize(
    ("text", "argv", "match"),
    [
        ("[simulate]\nbogus = 1\n", ["simulate"], "unknown key"),
        ("[nope]\nx = 1\n", ["run", "-o", "x"], "unknown config section"),
        ("[run]\nintents = 'i'\n", ["run", "-o", "x"], "unknown key"),  # not a run flag
        ("[run]\nagent = 'gpt'\n", ["run", "-o", "x"], "not one of"),
        ("[run]\nnum = 'many'\n", ["run", "-o", "x"], r"\[run\] num"),
        ("[run]\nseed = 1\n", ["run"], "needs out"),
        ("[simulate]\nout = 'o'\n", ["simulate"], "needs intents"),
        ("[run\n", ["run", "-o", "x"], "c.toml"),
    ],
)
def test_bad_config(tmp_path: Path, text: str, argv: list[str], match: str) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    with pytest.raises(IseSynthError, match=match):
        _resolve([*argv, "--config", str(cfg)])
    assert main([*argv, "--config", str(cfg)]) == 2


def test_cli_saves_resolved_config_and_it_reruns(tmp_path: Path) -> None:
    out = tmp_path / "out" / "intents.jsonl"
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[intents]\nnum = 40\nseed = 3\nembedding = "tfidf"\nout = "{out}"\n')
    assert (
        main(["intents", "--config", str(cfg), "--set", "threshold=0.8", "--api-key", "sk-x"]) == 0
    )
    saved_path = tmp_path / "out" / "intents.config.json"
    saved = json.loads(saved_path.read_text())
    assert saved["intents"]["num"] == 40 and saved["intents"]["threshold"] == 0.8
    assert saved["intents"]["out"] == str(out) and saved["intents"]["renderer"] == "template"
    assert "api_key" not in saved["intents"] and "sk-x" not in saved_path.read_text()
    lines = out.read_text().splitlines()
    assert main(["intents", "--config", str(saved_path)]) == 0  # the saved file runs it again
    assert out.read_text().splitlines() == lines
    assert json.loads(saved_path.read_text()) == saved


def test_simulate_saves_config_json_in_the_output_dir(tmp_path: Path) -> None:
    out = tmp_path / "o"
    assert (
        main(
            [
                "simulate",
                "--intents",
                str(tmp_path / "none.jsonl"),
                "-o",
                str(out),
                "--set",
                "max_user_turns=3",
            ]
        )
        == 2
    )
    saved = json.loads((out / "config.json").read_text())["simulate"]
    assert saved["max_user_turns"] == 3 and saved["intents"] == str(tmp_path / "none.jsonl")


def test_example_toml_resolves_for_every_command() -> None:
    for command in ("intents", "simulate", "run"):
        args = _resolve([command, "--config", str(EXAMPLE)])
        assert args.out is not None
    run = _resolve(["run", "--config", str(EXAMPLE)])
    assert (run.agent, run.simulator) == ("scripted", "scripted")
