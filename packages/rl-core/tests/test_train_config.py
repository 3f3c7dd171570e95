"""The train config's ``[algo]`` is rl-core's TrainerConfig: one set of defaults, a round trip."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import clawrl.rl_core as rl
import pytest
from clawrl.rl_core import ConfigError, TrainerConfig
from clawrl.rl_core.train import AlgoConfig, TrainConfig, load_config

SUBS = {
    "loss": rl.LossConfig,
    "grpo": rl.GRPOConfig,
    "ppo": rl.PPOConfig,
    "corrections": rl.CorrectionConfig,
    "optim": rl.OptimConfig,
}
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _default(f: dataclasses.Field[Any]) -> Any:
    assert f.default_factory is dataclasses.MISSING or f.default is dataclasses.MISSING
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def test_algo_section_embeds_trainer_config_and_defines_no_default_of_its_own() -> None:
    """AlgoConfig holds TrainerConfig and only the loop's two keys: a re-added flat field
    (``lr: float = 1e-5`` beside TrainerConfig's) fails here."""
    names = [f.name for f in dataclasses.fields(AlgoConfig)]
    assert names == ["trainer", "updates_per_step", "drop_zero_std_groups", "shuffle_rewards"]
    assert AlgoConfig().trainer == TrainerConfig()
    assert {f.name for f in dataclasses.fields(TrainerConfig)} >= set(SUBS)


def test_every_flat_algo_default_is_trainer_config_field_default() -> None:
    flat = load_config().algo.flat()
    expected: dict[str, Any] = {"name": TrainerConfig.algorithm}
    for f in dataclasses.fields(TrainerConfig):
        if f.name not in SUBS and f.name not in ("algorithm", "seed"):
            expected[f.name] = _default(f)
    for sub, cls in SUBS.items():
        for f in dataclasses.fields(cls):
            if f.name in ("temperature", "total_steps"):
                continue
            key = f"{sub}_{f.name}" if f.name == "eps" else f.name
            value = _default(f)
            expected[key] = list(value) if isinstance(value, tuple) else value
    expected |= {"updates_per_step": 1, "drop_zero_std_groups": False, "shuffle_rewards": False}
    assert flat == expected
    # the defaults the quickstart relies on: lr 1e-5 unless set, bounded forwards
    assert (flat["lr"], flat["token_budget"]) == (1e-5, 8192)


def test_trainer_config_is_algo_with_run_and_rollout_values() -> None:
    cfg = load_config(None, ["run.seed=3", "run.steps=5", "rollout.temperature=0.7"])
    t = cfg.trainer_config()
    assert (t.seed, t.loss.temperature, t.optim.total_steps) == (3, 0.7, 5)
    same = dataclasses.replace(
        t,
        seed=0,
        loss=dataclasses.replace(t.loss, temperature=1.0),
        optim=dataclasses.replace(t.optim, total_steps=1000),
    )
    assert same == TrainerConfig()  # nothing else differs from rl-core's defaults
    ups = load_config(None, ["run.steps=5", "algo.updates_per_step=3"])
    assert ups.trainer_config().optim.total_steps == 15


@pytest.mark.parametrize("example", ["quickstart", "quickstart_qwen3", "mix_harness", "scale_out"])
@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_algo_round_trips_through_saved_config(tmp_path: Path, example: str, algo: str) -> None:
    cfg = load_config(EXAMPLES / f"{example}.toml", [f"algo.name='{algo}'"])
    cfg.save(tmp_path / "config.json")
    again = load_config(tmp_path / "config.json")
    assert again == cfg and again.trainer_config() == cfg.trainer_config()
    assert AlgoConfig.from_flat(cfg.algo.flat()) == cfg.algo


def test_every_trainer_field_is_settable_from_algo() -> None:
    cfg = load_config(
        None,
        [
            "algo.name='ppo'",
            "algo.optim_eps=1e-6",
            "algo.grpo_eps=1e-3",
            "algo.betas=[0.8, 0.9]",
            "algo.schedule='linear'",
            "algo.num_minibatches=2",
            "algo.geo_mask_low=0.5",
            "algo.gamma=0.9",
        ],
    )
    t = cfg.trainer_config()
    assert (t.algorithm, t.optim.eps, t.grpo.eps, t.optim.betas) == ("ppo", 1e-6, 1e-3, (0.8, 0.9))
    assert (t.optim.schedule, t.num_minibatches, t.corrections.geo_mask_low) == ("linear", 2, 0.5)
    assert t.ppo.gamma == 0.9
    assert isinstance(cfg, TrainConfig)


def test_earlier_value_lr_zero_means_lr() -> None:
    """Saved config.json files of earlier versions wrote value_lr = 0 for "the policy's lr"."""
    assert load_config(None, ["algo.value_lr=0"]).trainer_config().optim.value_lr is None


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("algo.temperature=0.5", "unknown key"),  # rollout.temperature sets it
        ("algo.seed=1", "unknown key"),  # run.seed sets it
        ("algo.eps=1e-6", "unknown key"),  # ambiguous: grpo_eps or optim_eps
        ("algo.lr=-1", r"\[algo\]"),
        ("algo.token_budget=0", "token_budget"),
        ("algo.lr='fast'", r"\[algo\]"),
    ],
)
def test_bad_algo_keys(override: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(None, [override])


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("tasks.family='learnabel'", "tasks.family"),
        ("tasks.learnable_reward='fuzzy'", "learnable_reward"),
    ],
)
def test_bad_task_choices(override: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(None, [override])
    assert load_config(None, ["tasks.learnable_reward='exact'"]).tasks.learnable_reward == "exact"


def test_one_max_turns_default() -> None:
    """bench's rollout options, bench's CLI config and train's [rollout] share one default."""
    from clawrl.bench import DEFAULT_MAX_TURNS, RolloutOptions
    from clawrl.bench.config import BenchConfig

    assert load_config().rollout.max_turns == DEFAULT_MAX_TURNS
    assert RolloutOptions().max_turns == BenchConfig().max_turns == DEFAULT_MAX_TURNS
    # the quickstart's one-call tasks set their own limit
    assert load_config(EXAMPLES / "quickstart.toml").rollout.max_turns == 1


def test_model_section_is_the_proxy_default_model_spec_plus_path(tmp_path: Path) -> None:
    """``[model]`` declares no architecture field of its own: it is the proxy's
    DefaultModelSpec (one set of defaults) plus ``path``; the model it builds is the one
    build_default_model builds, so the cache entry is shared."""
    from clawrl.proxy import DefaultModelSpec, build_default_model
    from clawrl.rl_core.train import ModelConfig

    spec_fields = [f.name for f in dataclasses.fields(DefaultModelSpec)]
    assert [f.name for f in dataclasses.fields(ModelConfig)] == [*spec_fields, "path"]
    cfg = load_config(overrides=["model.hidden_size=64", "model.seed=3"])
    assert (cfg.model.hidden_size, cfg.model.seed) == (64, 3)
    cache = tmp_path / "models"
    built = cfg.model.build(cache)
    assert built == build_default_model("byte", cache_dir=cache, hidden_size=64, seed=3)
    assert built.name == DefaultModelSpec(hidden_size=64, seed=3).name


def test_model_section_errors_and_the_renamed_init_seed(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\[model\]: hidden_size must be a multiple"):
        load_config(overrides=["model.hidden_size=130"])
    with pytest.raises(ConfigError, match="unknown key"):
        load_config(overrides=["model.layers=3"])
    # an earlier saved config's init_seed still loads, as seed
    assert load_config(overrides=["model.init_seed=5"]).model.seed == 5
    # an HF directory of the user's skips the tiny-model checks
    assert load_config(overrides=["model.path=/m", "model.hidden_size=130"]).model.path == "/m"


def test_scale_out_example_describes_router_workers_and_sandbox_hosts() -> None:
    """examples/scale_out.toml: one file for the topology: the router and its
    workers, and the podman hosts with their capacities, as the loop will use them."""
    cfg = load_config(EXAMPLES / "scale_out.toml")
    b = cfg.backend
    assert (b.kind, b.sglang_router, len(b.sglang_worker_urls)) == ("sglang", True, 2)
    hosts = cfg.rollout.hosts()
    assert [(h.name, h.capacity) for h in hosts] == [("local", 32), ("box2", 112), ("box3", 112)]
    assert cfg.rollout.concurrency <= sum(h.capacity for h in hosts)
    assert str(hosts[1].model_socket) == "/run/clawrl-relay/model.sock"
    assert load_config(None).rollout.hosts() == []  # default: the local podman only
    from clawrl.rl_core.train import TrainLoop

    loop = TrainLoop(cfg)  # the loop places its agent sandboxes on those hosts
    assert loop.sandbox_hosts is not None
    assert [h.name for h in loop.sandbox_hosts.health()] == ["local", "box2", "box3"]
    assert TrainLoop(load_config(None)).sandbox_hosts is None


@pytest.mark.parametrize(
    ("hosts", "match"),
    [
        ("[{name='a', capacity=1}, {name='a', capacity=2}]", "duplicate"),
        ("[{name='a', capacity=0}]", "total capacity"),
        ("[{name='a'}]", "capacity"),
        ("[{name='a', capacity=1, colour='red'}]", "colour"),
        ("[{name='a', capacity=1, url='ssh://h/s', connection='c'}]", "sandbox_hosts"),
        ("[{name='a b', capacity=1}]", "sandbox_hosts"),
    ],
)
def test_bad_sandbox_hosts_are_config_errors(hosts: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(None, [f"rollout.sandbox_hosts={hosts}"])


def test_worker_urls_need_the_router() -> None:
    with pytest.raises(ConfigError, match="sglang_router"):
        load_config(
            None,
            [
                "backend.kind='sglang'",
                "backend.sglang_url='http://r:1'",
                "backend.sglang_worker_urls=['http://w:1']",
            ],
        )


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("backend.dtype='fp16'", "backend.dtype"),
        ("backend.num_threads=-1", "backend.num_threads"),
        ("backend.prefix_cache_mib=-1", "prefix_cache_mib"),
    ],
)
def test_bad_serving_options(override: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(None, [override])
    b = load_config(None, ["backend.dtype='bf16'", "backend.prefix_cache_mib=64"]).backend
    assert (b.dtype, b.num_threads, b.prefix_cache_mib) == ("bf16", 0, 64)
