"""The black-box RL loop (``train``): rollouts through agent harnesses in podman sandboxes,
captured by the proxy, trained with tree-packed GRPO / PPO, weights synced back.

Needs the ``[train]`` extra (clawrl-bench, clawrl-proxy, matplotlib); not imported by
``clawrl.rl_core`` itself.
"""

from clawrl.rl_core.train.config import (
    AlgoConfig,
    AsyncConfig,
    BackendConfig,
    ColdStartConfig,
    EvalConfig,
    LoggingConfig,
    ModelConfig,
    RolloutConfig,
    RunConfig,
    TasksConfig,
    TrainConfig,
    apply_overrides,
    load_config,
)
from clawrl.rl_core.train.loop import TrainError, TrainLoop, run_training, scripted_turns
from clawrl.rl_core.train.metrics_log import MetricsLog, plot_curves, read_jsonl
from clawrl.rl_core.train.rows import prefix_cache_row
from clawrl.rl_core.train.trees import BuiltTrees, RolloutData, build_group_trees

__all__ = [
    "AlgoConfig",
    "AsyncConfig",
    "BackendConfig",
    "BuiltTrees",
    "ColdStartConfig",
    "EvalConfig",
    "LoggingConfig",
    "MetricsLog",
    "ModelConfig",
    "RolloutConfig",
    "RolloutData",
    "RunConfig",
    "TasksConfig",
    "TrainConfig",
    "TrainError",
    "TrainLoop",
    "apply_overrides",
    "build_group_trees",
    "load_config",
    "plot_curves",
    "prefix_cache_row",
    "read_jsonl",
    "run_training",
    "scripted_turns",
]
