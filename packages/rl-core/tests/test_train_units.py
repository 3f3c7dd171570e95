"""The train loop's parts that need no sandbox: config, group trees, scripted policy, logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from clawrl.rl_core import ConfigError
from clawrl.rl_core.train import (
    RolloutData,
    TrainConfig,
    apply_overrides,
    build_group_trees,
    load_config,
    plot_curves,
    read_jsonl,
    scripted_turns,
)
from clawrl.rl_core.train.metrics_log import MetricsLog

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


# ------------------------------------------------------------------ config
def _algo(cfg: TrainConfig, *keys: str) -> tuple[Any, ...]:
    """Values of flat [algo] keys (the TOML's names) of a loaded config."""
    flat = cfg.algo.flat()
    return tuple(flat[k] for k in keys)


def test_defaults_and_quickstart_load() -> None:
    cfg = load_config()
    assert cfg.algo.name == "grpo" and cfg.rollout.harnesses == ["reference"]
    q = load_config(EXAMPLES / "quickstart.toml")
    assert q.cold_start.enabled and q.backend.kind == "embedded"
    assert q.model.tokenizer == "byte"
    # a fixed-length cold start on every training task, evaluated once at its end
    assert q.cold_start.tasks == q.tasks.train_n
    assert [s for s in range(1, 301) if q.cold_start.evaluates_at(s)] == [125]
    # PPO's own keys ([algo.ppo]) reach only --algo ppo
    assert _algo(q, "kl_coef", "value_lr") == (0.0, None)  # value_lr None: the policy's lr
    qp = load_config(EXAMPLES / "quickstart.toml", ["algo.name='ppo'"])
    assert _algo(qp, "kl_coef", "value_lr", "value_coef") == (0.05, 3e-3, 0.02)
    assert _algo(qp, "lr", "updates_per_step") == _algo(q, "lr", "updates_per_step")
    q3 = load_config(EXAMPLES / "quickstart_qwen3.toml")
    assert q3.model.tokenizer == "qwen3" and q3.cold_start.stop_at_reward == 0.25
    assert [s for s in range(1, 61) if q3.cold_start.evaluates_at(s)][:3] == [35, 40, 45]


def test_overrides_parse_toml_values(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text('[run]\nsteps = 3\n[rollout]\nharnesses = ["reference"]\n')
    cfg = load_config(
        p,
        [
            "algo.name=ppo",
            "run.steps=5",
            "algo.lr=3e-4",
            'rollout.harnesses=["reference", "mini-swe-agent"]',
            "run.out=x/y",
        ],
    )
    assert cfg.algo.name == "ppo" and cfg.run.steps == 5 and cfg.algo.trainer.optim.lr == 3e-4
    assert cfg.rollout.harnesses == ["reference", "mini-swe-agent"]
    assert cfg.run.out == "x/y"  # not TOML: kept as a string


def test_saved_config_round_trips(tmp_path: Path) -> None:
    cfg = load_config(None, ["async.enabled=true", "async.max_staleness=2", "run.seed=7"])
    cfg.save(tmp_path / "config.json")
    again = load_config(tmp_path / "config.json")
    assert again == cfg and again.async_.max_staleness == 2


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["nope.x=1"], "unknown config section"),
        (["run.nope=1"], "unknown key"),
        (["algo.name=dpo"], "algo.name"),
        (["rollout.samples=1"], "GRPO needs"),
        (["backend.kind=sglang"], "sglang_url"),
        (["rollout.temperature=0"], "temperature"),
        (["rollout.verifier='local'"], "rollout.verifier"),
        (["runsteps"], "section.key=value"),
    ],
)
def test_bad_config_is_a_typed_error(overrides: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(None, overrides)


def test_unreadable_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[run\n")
    with pytest.raises(ConfigError):
        load_config(bad)


def test_per_algorithm_tables(tmp_path: Path) -> None:
    """[algo.ppo] keys apply only with algo.name = "ppo"; the command line wins over both."""
    p = tmp_path / "c.toml"
    p.write_text(
        "[algo]\nlr = 1e-4\nkl_coef = 0.01\n[algo.ppo]\nkl_coef = 0.05\n"
        "value_lr = 1e-3\n[algo.grpo]\nlr = 2e-4\n"
    )
    g = load_config(p)
    assert _algo(g, "name", "lr", "kl_coef", "value_lr") == ("grpo", 2e-4, 0.01, None)
    q = load_config(p, ["algo.name='ppo'"])
    assert _algo(q, "lr", "kl_coef", "value_lr") == (1e-4, 0.05, 1e-3)
    assert _algo(load_config(p, ["algo.kl_coef=0", "algo.name='ppo'"]), "kl_coef") == (0.0,)
    assert _algo(load_config(p, ["algo.ppo.kl_coef=0.2", "algo.name='ppo'"]), "kl_coef") == (0.2,)
    assert _algo(load_config(p, ["algo.ppo.kl_coef=0.2"]), "kl_coef") == (0.01,)
    q.save(tmp_path / "config.json")  # saved resolved: no per-algorithm tables
    assert load_config(tmp_path / "config.json") == q
    assert "ppo" not in json.loads((tmp_path / "config.json").read_text())["algo"]
    for text, match in (
        ("[algo.ppo]\nbogus = 1\n", "bogus"),
        ("[algo]\nppo = 3\n", r"\[algo.ppo\] must be a table"),
        ('[algo.ppo]\nname = "grpo"\n', "cannot set name"),
    ):
        p.write_text(text)
        with pytest.raises(ConfigError, match=match):
            load_config(p, ["algo.name='ppo'"])


def test_apply_overrides_does_not_mutate() -> None:
    raw: dict[str, Any] = {"run": {"steps": 1}, "algo": {"ppo": {"kl_coef": 0.1}}}
    out = apply_overrides(raw, ["run.steps=2", "algo.ppo.kl_coef=0.3"])
    assert raw["run"]["steps"] == 1 and out["run"]["steps"] == 2
    assert raw["algo"]["ppo"]["kl_coef"] == 0.1 and out["algo"]["ppo"]["kl_coef"] == 0.3


def test_to_dict_uses_toml_section_names() -> None:
    d = TrainConfig().to_dict()
    assert "async" in d and "async_" not in d


# ------------------------------------------------------------------ trees
SYSTEM = list(range(1, 41))  # a shared "system prompt"


def _record(
    sid: str,
    seq: int,
    prompt: list[int],
    completion: list[int],
    version: int = 0,
    finish: str = "stop",
) -> dict[str, Any]:
    return {
        "call_id": f"{sid}-{seq}",
        "session_id": sid,
        "seq": seq,
        "prompt_ids": prompt,
        "completion_ids": completion,
        "completion_logprobs": [-0.5] * len(completion),
        "policy_version": version,
        "finish_reason": finish,
    }


def _rollout(
    rid: str,
    group: str,
    task_tok: int,
    completion: list[int],
    reward: float,
    harness: str = "reference",
) -> RolloutData:
    prompt = [*SYSTEM, task_tok]
    return RolloutData(
        rid, group, f"task{task_tok}", harness, reward, [_record(rid, 0, prompt, completion)]
    )


def test_group_trees_one_per_group_and_rewards() -> None:
    ros = [
        _rollout("a0", "t1/reference", 100, [50, 51], 1.0),
        _rollout("a1", "t1/reference", 100, [50, 52], 0.0),
        _rollout("b0", "t2/reference", 101, [60], 0.5),
        _rollout("b1", "t2/reference", 101, [61, 62, 63], 0.5),
    ]
    built = build_group_trees(ros)
    assert len(built.trees) == 2
    assert built.rewards == {"a0": 1.0, "a1": 0.0, "b0": 0.5, "b1": 0.5}
    assert built.groups["a1"] == "t1/reference"
    # group t1 shares 41 prompt tokens + token 50; t2 shares the 41 prompt tokens
    assert built.unique_tokens == (41 + 1 + 1 + 1) + (41 + 1 + 3)
    assert built.flat_tokens == 43 + 43 + 42 + 44
    assert built.compression == pytest.approx(built.flat_tokens / built.unique_tokens)
    for tree in built.trees:
        assert {t.metadata["group_id"] for t in tree.trajectories} <= {
            "t1/reference",
            "t2/reference",
        }


def test_merge_groups_keeps_group_ids_and_shares_the_system_prompt() -> None:
    ros = [_rollout(f"r{i}", f"t{i % 2}/h", 100 + i % 2, [50 + i], float(i % 2)) for i in range(4)]
    sep = build_group_trees(ros)
    one = build_group_trees(ros, merge_groups=True)
    assert len(one.trees) == 1 and one.groups == sep.groups
    assert one.unique_tokens == sep.unique_tokens - 40  # the shared prefix is stored once
    metas = {t.rollout_id: t.metadata["group_id"] for t in one.trees[0].trajectories}
    assert metas == sep.groups


def test_merge_groups_into_one_tree_per_rank() -> None:
    # 4 groups, the second one largest: dealt by unique tokens, each part merged
    ros = [
        _rollout(f"r{i}", f"t{i}/h", 100 + i, [50] * (200 if i == 1 else 1), 0.0) for i in range(4)
    ]
    ros += [_rollout(f"s{i}", f"t{i}/h", 100 + i, [60], 1.0) for i in range(4)]
    sep = build_group_trees(ros)
    two = build_group_trees(ros, merge_groups=True, parts=2)
    assert len(two.trees) == 2 and two.groups == sep.groups and two.rewards == sep.rewards
    # the large group alone on one tree, the other three (sharing their prefix) on the other
    ids = sorted(sorted(t.rollout_id for t in tree.trajectories) for tree in two.trees)
    assert ids == [["r0", "r2", "r3", "s0", "s2", "s3"], ["r1", "s1"]]
    assert two.unique_tokens == sep.unique_tokens - 2 * 40
    assert len(build_group_trees(ros, merge_groups=True, parts=8).trees) == 4  # one per group
    assert len(build_group_trees(ros[:1], merge_groups=True, parts=2).trees) == 1


def test_empty_and_failed_calls_are_left_out() -> None:
    ros = [
        RolloutData("e", "g", "t", "reference", 0.0, []),
        RolloutData("f", "g", "t", "reference", 0.0, [_record("f", 0, SYSTEM, [], finish="error")]),
        _rollout("ok", "g", 100, [5], 1.0),
    ]
    built = build_group_trees(ros)
    assert built.empty_rollouts == 2 and list(built.rewards) == ["ok"]


def test_dead_leaf_retry_is_removed() -> None:
    prompt = [*SYSTEM, 100]
    recs = [_record("r", 0, prompt, [7, 8]), _record("r", 1, prompt, [9, 9])]
    built = build_group_trees([RolloutData("r", "g", "t", "reference", 1.0, recs)])
    assert built.dead_leaves == 1 and built.n_trajectories == 1


def test_over_branched_rollout_is_dropped() -> None:
    prompt = [*SYSTEM, 100]
    recs = [_record("r", i, prompt[: 10 + i], [200 + i]) for i in range(5)]
    ok = _rollout("fine", "g", 100, [5], 0.0)
    built = build_group_trees(
        [RolloutData("r", "g", "t", "reference", 1.0, recs), ok], max_leaves=2
    )
    assert built.dropped_rollouts == 1 and list(built.rewards) == ["fine"]


def test_mix_harness_groups_are_separate() -> None:
    ros = [
        _rollout("a", "t1/reference", 100, [5], 1.0),
        _rollout("b", "t1/mini-swe-agent", 100, [6], 0.0, harness="mini-swe-agent"),
    ]
    built = build_group_trees(ros)
    assert len(built.trees) == 2 and len(set(built.groups.values())) == 2


def test_tree_compression_per_harness() -> None:
    """Each harness's rollouts merged into one tree: its shared prompt counted once."""
    from clawrl.rl_core.train.rows import tree_row

    n = len(SYSTEM) + 1
    ros = [
        _rollout("a", "t1/pi", 100, [5, 6], 1.0, harness="pi"),
        _rollout("b", "t1/pi", 100, [5, 7], 0.0, harness="pi"),
        _rollout("c", "t2/pi", 101, [8], 0.0, harness="pi"),
        _rollout("d", "t1/codex", 100, [9], 1.0, harness="codex"),
    ]
    row = tree_row(build_group_trees(ros))
    assert row["flat_tokens/pi"] == 3 * n + 5 and row["flat_tokens/codex"] == n + 1
    # pi: SYSTEM once; then task 100 -> 5 -> {6, 7} and task 101 -> 8
    assert row["tree_tokens/pi"] == len(SYSTEM) + 1 + 1 + 2 + 1 + 1
    assert row["tree_compression/codex"] == 1.0
    assert row["tree_compression/pi"] == (3 * n + 5) / row["tree_tokens/pi"]


# ------------------------------------------------------------------ scripted policy
def test_scripted_turns_for_learnable_tasks(tmp_path: Path) -> None:
    from clawrl.bench import generate_learnable_tasks
    from clawrl.proxy import parse_completion

    task = generate_learnable_tasks(tmp_path, "train", 1, 0)[0]
    turns = scripted_turns(task)
    assert len(turns) == 1
    parsed = parse_completion(turns[0] + "<|im_end|>", finish_reason="stop")
    assert len(parsed.tool_calls) == 1 and parsed.tool_calls[0].name == "write_file"
    args = parsed.tool_calls[0].arguments
    args = json.loads(args) if isinstance(args, str) else args
    assert args == {"path": task.metadata["file"], "content": task.metadata["word"]}


@pytest.mark.parametrize("harness", ["pi", "mini-swe-agent", "claude-code", "reference"])
def test_fenced_scripted_turns_carry_the_same_calls(tmp_path: Path, harness: str) -> None:
    """``cold_start.call_style = "fenced"``: the scripted turns write each call as a fenced
    JSON block (no ``<tool_call>`` token), and a JSON-call family's parser reads back
    exactly the calls and final answer of the ``tags`` turns."""
    from clawrl.bench import generate_chore_tasks
    from clawrl.bench.harness import get_harness
    from clawrl.proxy import parse_completion

    task = generate_chore_tasks(tmp_path, "train", 1, 0, templates=["config_key"])[0]
    h = get_harness(harness)
    tags, fenced = scripted_turns(task, h), scripted_turns(task, h, "fenced")
    assert len(tags) == len(fenced) >= 3

    def read(text: str) -> tuple[str, list[tuple[str, Any]]]:
        p = parse_completion(
            text + "<|im_end|>",
            finish_reason="stop",
            json_calls=True,
            tool_names=[h.shell_tool[0] if hasattr(h, "shell_tool") else "bash"],
        )
        return p.content, [(c.name, c.arguments) for c in p.tool_calls]

    assert [read(t) for t in fenced] == [read(t) for t in tags]
    assert all("<tool_call>" not in t for t in fenced)
    assert sum(bool(read(t)[1]) for t in fenced) >= 2


def test_an_unknown_call_style_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"cold_start\.call_style must be 'tags' or 'fenced'"):
        load_config(None, ["cold_start.call_style='xml'"])


# ------------------------------------------------------------------ logs
def test_jsonl_skips_torn_line_and_plot_writes_png(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path)
    rows = [
        {
            "kind": "train",
            "step": s,
            "reward_mean/reference": 0.1 * s,
            "pass_rate": 0.0,
            "grad_norm": 1.0,
            "time/update": 2.0,
            "mean_abs_logprob_diff": float("nan"),
        }
        for s in range(1, 4)
    ]
    rows.append({"kind": "eval", "step": 3, "eval_reward": 0.4})
    for r in rows:
        log.write(r)
    with log.path.open("a") as f:
        f.write('{"kind": "train", "st')  # a writer killed mid-line
    got = read_jsonl(log.path)
    assert len(got) == 4 and got[0]["mean_abs_logprob_diff"] is None
    png = plot_curves(got, tmp_path / "curves.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert np.isclose(got[2]["reward_mean/reference"], 0.3)


def test_learnable_vocabulary_from_config(tmp_path: Path) -> None:
    """[tasks] learnable_names / learnable_words reach bench's generator; out-of-range
    values are a ConfigError naming the section, before anything runs."""
    from clawrl.rl_core.train import TrainLoop

    q = load_config(
        EXAMPLES / "quickstart.toml",
        [f'run.out="{tmp_path / "q"}"', "tasks.train_n=20", "tasks.heldout_n=5"],
    )
    assert (q.tasks.learnable_names, q.tasks.learnable_words) == (8, 12)
    train, held = TrainLoop(q)._tasks()
    assert {t.metadata["file"] for t in train + held} <= {
        f"{s}.txt" for s in ("note", "hello", "data", "todo", "out", "memo", "list", "log")
    }
    assert len({t.metadata["word"] for t in train + held}) <= 12
    assert not {t.id for t in train} & {t.id for t in held}
    bad = load_config(overrides=[f'run.out="{tmp_path / "b"}"', "tasks.learnable_words=500"])
    with pytest.raises(ConfigError, match=r"\[tasks\].*n_words"):
        TrainLoop(bad)._tasks()


def test_chores_family_from_config(tmp_path: Path) -> None:
    """tasks.family = "chores" draws bench's workspace chores (ClawGym layout) into
    disjoint train / held-out splits; an unknown template is a ConfigError naming [tasks]."""
    from clawrl.bench import Layout
    from clawrl.rl_core.train import TrainLoop

    over = [f'run.out="{tmp_path / "c"}"', 'tasks.family="chores"', "tasks.train_n=6"]
    train, held = TrainLoop(load_config(None, [*over, "tasks.heldout_n=3"]))._tasks()
    assert (len(train), len(held)) == (6, 3)
    assert {t.layout for t in train + held} == {Layout.CLAWGYM}
    assert {t.metadata["split"] for t in train} == {"train"}
    assert {t.metadata["split"] for t in held} == {"heldout"}
    assert not {t.id for t in train} & {t.id for t in held}
    some = load_config(None, [*over, 'tasks.chores_templates=["config_key"]'])
    assert {t.metadata["template"] for t in TrainLoop(some)._tasks()[0]} == {"config_key"}
    bad = load_config(None, [*over, 'tasks.chores_templates=["nope"]'])
    with pytest.raises(ConfigError, match=r"\[tasks\].*templates"):
        TrainLoop(bad)._tasks()


def test_real_recipe_config_and_model_path(tmp_path: Path) -> None:
    """examples/real_grpo.toml loads (exact reward, a kit model name, "auto" serving and
    training precision: bf16 where native; revert tried: the recipe without the two keys fails); [model] path takes a
    directory or a kit name, and anything else is a ConfigError naming [model]."""
    from clawrl.proxy import KNOWN_MODELS
    from clawrl.rl_core.train import TrainLoop

    real = load_config(EXAMPLES / "real_grpo.toml", [f'run.out="{tmp_path / "r"}"'])
    assert real.tasks.learnable_reward == "exact" and real.model.path in KNOWN_MODELS
    # the fast path is the recipe: bf16 serving and bf16 autocast training where bf16 is
    # native (an AVX2-only CPU runs bf16 matmuls over 100 times slower than fp32)
    assert real.algo.trainer.precision == "auto" and real.backend.dtype == "auto"
    held = TrainLoop(real)._tasks()[1]
    assert all("EXACT = True" in (t.verifier.files_dir / "check.py").read_text() for t in held)
    model = TrainLoop(load_config(None, [f'run.out="{tmp_path / "t"}"']))._model_dir()
    given = load_config(None, [f'run.out="{tmp_path / "d"}"', f'model.path="{model}"'])
    assert TrainLoop(given)._model_dir() == model
    for bad in (str(tmp_path / "no" / "such"), "no-such-model"):
        cfg = load_config(None, [f'run.out="{tmp_path / "b"}"', f'model.path="{bad}"'])
        with pytest.raises(ConfigError, match=r"\[model\] path"):
            TrainLoop(cfg)._model_dir()


def test_resume_supersedes_rows_of_steps_that_run_again(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path)
    rows = [
        {"kind": "sft", "sft_step": 1},
        {"kind": "eval", "step": 0, "tag": "coldstart-1"},
        {"kind": "train", "step": 1},
        {"kind": "train", "step": 2},
        {"kind": "eval", "step": 2, "tag": "step-2"},
        {"kind": "train", "step": 3},
    ]
    for r in rows:
        log.write(r)
    assert log.supersede_after(1) == 3  # checkpoint after step 1: steps 2-3 run again
    kept = read_jsonl(tmp_path / "metrics.jsonl")
    assert kept == rows[:3]
    assert read_jsonl(tmp_path / "metrics.superseded.jsonl") == rows[3:]
    assert log.supersede_after(1) == 0  # idempotent
    log.write({"kind": "train", "step": 2})
    assert [r.get("step") for r in read_jsonl(tmp_path / "metrics.jsonl")] == [None, 0, 1, 2]


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"steps": 200, "eval_every": 50, "eval_from": 100}, [100, 150, 200]),
        ({"steps": 200, "eval_every": 50}, [50, 100, 150, 200]),
        ({"steps": 120, "eval_every": 50, "eval_from": 75}, [100, 120]),
        ({"steps": 30}, [30]),  # eval_every = 0: only the last step
    ],
)
def test_cold_start_eval_schedule(fields: dict[str, int], expected: list[int]) -> None:
    from clawrl.rl_core.train import ColdStartConfig

    cs = ColdStartConfig(**fields)
    assert [s for s in range(1, cs.steps + 1) if cs.evaluates_at(s)] == expected


def test_mix_harness_real_recipe(tmp_path: Path) -> None:
    """The real-model mix-harness recipe: bf16, the chores family, Claude Code and OpenClaw
    among ≥ 3 third-party training harnesses, one more harness only evaluated (transfer),
    a greedy evaluation beside the training temperature, and room for the harnesses'
    system prompts in the prompt KV cache."""
    cfg = load_config(EXAMPLES / "mix_harness_real.toml", [f'run.out="{tmp_path / "m"}"'])
    assert cfg.backend.dtype == "auto" and cfg.algo.trainer.precision == "auto"
    assert cfg.tasks.family == "chores" and cfg.eval.greedy
    trained = set(cfg.rollout.harnesses)
    assert {"claude-code", "openclaw"} <= trained and len(trained - {"reference"}) >= 3
    assert set(cfg.eval.harnesses) - trained == {"codex"}
    assert cfg.backend.prefix_cache_mib >= 1024
    # a cold start in the model's own call format, SFT under the run's memory settings
    assert cfg.cold_start.enabled and cfg.cold_start.call_style == "fenced"
    assert cfg.algo.trainer.gradient_checkpointing
    # every call the harnesses make fits one forward (Claude Code's prompt is ~19k tokens)
    assert cfg.algo.trainer.token_budget is not None and cfg.algo.trainer.token_budget > 24_000


def test_suite_directories_from_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """tasks.family = "path" trains on one suite directory and, with tasks.heldout_path,
    evaluates on another; a missing directory is a one-line configuration error (exit 2)
    before anything runs, never a traceback."""
    from clawrl.bench import generate_learnable_tasks
    from clawrl.rl_core.train import TrainLoop
    from clawrl.rl_core.train_cli import main as train_main

    generate_learnable_tasks(tmp_path / "tr", "train", 3, 0)
    generate_learnable_tasks(tmp_path / "ho", "heldout", 2, 0)
    over = [f'run.out="{tmp_path / "r"}"', 'tasks.family="path"', f'tasks.path="{tmp_path / "tr"}"']
    train, held = TrainLoop(load_config(None, over))._tasks()
    assert len(train) == 3 and [t.id for t in held] == [t.id for t in train]
    train, held = TrainLoop(
        load_config(None, [*over, f'tasks.heldout_path="{tmp_path / "ho"}"'])
    )._tasks()
    assert (len(train), len(held)) == (3, 2)
    assert {t.metadata["split"] for t in held} == {"heldout"}
    with pytest.raises(ConfigError, match="heldout_path is for"):
        load_config(None, [f'tasks.heldout_path="{tmp_path / "ho"}"'])
    for bad in (
        [*over[:2], f'tasks.path="{tmp_path / "nope"}"'],
        [*over, 'tasks.heldout_path="/nope"'],
    ):
        args = ["--config", "/dev/null", "--no-progress", *(a for o in bad for a in ("--set", o))]
        assert train_main(args) == 2
        err = capsys.readouterr().err
        assert "nope" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_the_cold_start_sft_keeps_the_runs_memory_settings() -> None:
    """The cold start's SFT trainer checkpoints activations and freezes the embeddings as
    the run's RL updates do (without checkpointing a 0.5B model's SFT step held ~23 GB)."""
    from types import SimpleNamespace

    from clawrl.rl_core.train.cold_start import _sft_trainer

    cfg = load_config(
        None,
        [
            "algo.gradient_checkpointing=true",
            "algo.freeze_embeddings=true",
            "algo.precision='bf16'",
            "algo.token_budget=32768",
            "cold_start.lr=2e-5",
        ],
    )
    loop = SimpleNamespace(cfg=cfg, new_trainer=lambda config: config)
    sft = _sft_trainer(loop)  # type: ignore[arg-type]
    assert sft.gradient_checkpointing and sft.freeze_embeddings
    assert sft.precision == "bf16" and sft.token_budget == 32768
    assert sft.optim.lr == 2e-5 and sft.loss.aggregation == "token_mean"
    assert sft.lora is None and not sft.fsdp
