"""A user's mistake on the command lines (bench, train, proxy serve, synth): exit status 2 and
one line on stderr that names the flag or the ``[section] key``, before any work starts;
never a traceback."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from clawrl.bench.cli import main as bench_main
from clawrl.ise_synth.cli import main as synth_main
from clawrl.proxy.cli import main as proxy_main
from clawrl.rl_core.train_cli import _claim_out
from clawrl.rl_core.train_cli import main as train_main


def _one_line(capsys: pytest.CaptureFixture[str], *names: str) -> str:
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in out + err
    for name in names:
        assert name in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["--k", "0"], ["ks (--k)"]),
        (["--k", "1", "0", "--list"], ["ks (--k)"]),
        (["--samples", "0"], ["samples (--samples)"]),
        (["--model-dir", "/no/such/model"], ["--model-dir", "/no/such/model"]),
        (["--model-dir", "qwen3-tiny"], ["--model-dir", "qwen3-tiny", "known model"]),
        (["--model", "sglang"], ["sglang_url (--sglang-url)"]),
        (["--harness", "refernce"], ["refernce"]),
    ],
)
def test_bench_rejects_bad_options_before_any_rollout(
    argv: list[str], names: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert bench_main([*argv, "--output-dir", str(out)]) == 2
    _one_line(capsys, *names)
    assert not out.exists()  # nothing written, no empty output folder


def test_bench_model_dir_that_is_not_a_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "m").mkdir()
    assert bench_main(["--model-dir", str(tmp_path / "m")]) == 2
    _one_line(capsys, "model_dir (--model-dir)", "config.json")


def test_bench_output_dir_that_is_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "f").write_text("x")
    assert bench_main(["--harness", "oracle", "--output-dir", str(tmp_path / "f")]) == 2
    _one_line(capsys, "output_dir (--output-dir)")


def test_bench_config_file_errors_name_their_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "bench.toml"
    cfg.write_text("ks = [0]\nnumm = 1\n")
    assert bench_main(["--config", str(cfg)]) == 2
    _one_line(capsys, "ks (--k)", "numm: unknown key")


def test_bench_task_alone_runs_only_that_task(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task = tmp_path / "only"
    (task / "tests").mkdir(parents=True)
    (task / "instruction.md").write_text("Write hello to /app/out.txt\n")
    (task / "task.toml").write_text('version = "1.0"\n')
    (task / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    assert bench_main(["--task", str(task), "--list"]) == 0
    out = capsys.readouterr().out
    assert "1 tasks" in out and "only" in out
    # with a suite named as well, both are selected
    assert bench_main(["--task", str(task), "--suite", "builtin", "--list"]) == 0
    assert "7 tasks" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("overrides", "names"),
    [
        (["rollout.samples=abc"], ["[rollout] samples", "int"]),
        (["rollout.temperature='hot'"], ["[rollout] temperature"]),
        (["algo.lr='fast'"], ["[algo] lr"]),
        (["rollout.harnesses=['refernce']"], ["[rollout] harnesses", "refernce"]),
        (["run.numm=1"], ["[run]", "numm"]),
        pytest.param(
            ["logging.tensorboard=true"],
            ["[logging] tensorboard"],
            marks=pytest.mark.skipif(
                importlib.util.find_spec("tensorboard") is not None, reason="installed"
            ),
        ),
    ],
)
def test_train_rejects_bad_values(
    overrides: list[str],
    names: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sets = [a for o in overrides for a in ("--set", o)]
    assert train_main([*sets, "--out", str(tmp_path / "run")]) == 2
    _one_line(capsys, *names)
    assert not (tmp_path / "run").exists()


def test_train_refuses_a_used_output_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 0}\n')
    assert train_main(["--out", str(out)]) == 2
    _one_line(capsys, "--out", "--resume", "--overwrite")
    assert (out / "metrics.jsonl").read_text() == '{"step": 0}\n'
    assert train_main(["--out", str(out), "--resume", "--overwrite"]) == 2
    _one_line(capsys, "--resume", "--overwrite")
    # --overwrite removes an earlier run's folder; a folder that holds no run is kept
    assert _claim_out(out, resume=False, overwrite=True) is None and not out.exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert "not removed" in (_claim_out(other, resume=False, overwrite=True) or "")
    assert (other / "notes.txt").exists()
    assert _claim_out(tmp_path / "new", resume=False, overwrite=False) is None


@pytest.mark.parametrize("model", ["/no/such/model", "qwen3-tiny", "EMPTY"])
def test_proxy_serve_rejects_a_bad_model(
    model: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if model == "EMPTY":
        model = str(tmp_path)
    assert proxy_main(["serve", "--model", model, "--port", "0", "--admin-port", "0"]) == 2
    _one_line(capsys, f"--model {model}")


def test_synth_errors_keep_their_section(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert synth_main(["intents"]) == 2
    _one_line(capsys, "[intents]")
    cfg = tmp_path / "synth.toml"
    cfg.write_text("[intents]\nnumm = 1\n")
    assert synth_main(["intents", "--config", str(cfg)]) == 2
    _one_line(capsys, "[intents]", "numm")


def test_bench_tables_stay_whole_when_piped(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "software development" in out and "…" not in out
