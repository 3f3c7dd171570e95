"""Tree-packed GRPO, PPO and SFT for LLM agents.

One forward pass over a packed prefix tree (``clawrl.prefixtree.PackedTree``) gives exactly the
losses and gradients of training every root-to-leaf path separately; the math lives in short
functions (advantages, losses, corrections), the trainer orchestrates.
"""

from clawrl.rl_core.advantages import gae_along_paths, grpo_advantages, whiten_advantages
from clawrl.rl_core.config import (
    Aggregation,
    CorrectionConfig,
    GRPOConfig,
    LossConfig,
    OptimConfig,
    PPOConfig,
    TrainerConfig,
)
from clawrl.rl_core.corrections import (
    correction_metrics,
    geometric_sequence_mask,
    ratio_mask,
    truncated_importance_weights,
)
from clawrl.rl_core.errors import (
    CheckpointError,
    ConfigError,
    MinibatchCapWarning,
    MissingGroupError,
    PackingError,
    RLCoreError,
    SFTDataError,
    TokenBudgetError,
)
from clawrl.rl_core.flex import tree_block_mask
from clawrl.rl_core.forward import (
    TreeForwardOutput,
    TreeModel,
    chunked_token_logprobs,
    tree_attention_mask,
    tree_forward,
)
from clawrl.rl_core.losses import (
    aggregation_weights,
    clipped_surrogate_loss,
    entropy_bonus,
    kl_k3,
    reference_kl_loss,
    scatter_to_tokens,
    sft_loss,
    value_loss,
)
from clawrl.rl_core.packing import (
    TokenSequence,
    TreeBatch,
    TreePiece,
    pack_token_sequences,
    split_by_token_budget,
    validate_packed_tree,
)
from clawrl.rl_core.sampling import Completion, sample_completions
from clawrl.rl_core.sft import (
    epoch_batches,
    pack_sft_trajectories,
    read_trajectories,
    render_sft_calls,
)
from clawrl.rl_core.step import (
    OldPass,
    PreparedRL,
    loss_backward,
    old_pass,
    prepare_rl,
    prepare_sft,
)
from clawrl.rl_core.trainer import Trainer, seed_everything
from clawrl.rl_core.value import Critic, ValueHead

__version__ = "0.1.0"

__all__ = [
    "Aggregation",
    "CheckpointError",
    "Completion",
    "ConfigError",
    "CorrectionConfig",
    "Critic",
    "GRPOConfig",
    "LossConfig",
    "MinibatchCapWarning",
    "MissingGroupError",
    "OldPass",
    "OptimConfig",
    "PPOConfig",
    "PackingError",
    "PreparedRL",
    "RLCoreError",
    "SFTDataError",
    "TokenBudgetError",
    "TokenSequence",
    "Trainer",
    "TrainerConfig",
    "TreeBatch",
    "TreeForwardOutput",
    "TreeModel",
    "TreePiece",
    "ValueHead",
    "__version__",
    "aggregation_weights",
    "chunked_token_logprobs",
    "clipped_surrogate_loss",
    "correction_metrics",
    "entropy_bonus",
    "epoch_batches",
    "gae_along_paths",
    "geometric_sequence_mask",
    "grpo_advantages",
    "kl_k3",
    "loss_backward",
    "old_pass",
    "pack_sft_trajectories",
    "pack_token_sequences",
    "prepare_rl",
    "prepare_sft",
    "ratio_mask",
    "read_trajectories",
    "reference_kl_loss",
    "render_sft_calls",
    "sample_completions",
    "scatter_to_tokens",
    "seed_everything",
    "sft_loss",
    "split_by_token_budget",
    "tree_attention_mask",
    "tree_block_mask",
    "tree_forward",
    "truncated_importance_weights",
    "validate_packed_tree",
    "value_loss",
    "whiten_advantages",
]
